"""Decode throughput: jaxtom's jitted KV-cache sampler vs transformers generate (and tunix).

All samplers run greedy decoding of the same tiny random Qwen3 checkpoint (written once by
transformers), the same batch, prompt and generation lengths, in this one process. Timings
are medians over repeats after a warm-up (compilation excluded for every side); the sides'
repeats alternate, so load from other processes on a shared machine hits them alike. The
last line is one JSON object.

    python benchmarks/sampling.py [--batch 8 --prompt-len 32 --gen-len 64 --repeats 5]

tunix is optional (`pip install -e ".[bench]"` in a separate venv, since it pins older
transformers); without it the script says so and reports only the transformers ratio.
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

import numpy as np

CONFIG = dict(vocab_size=2048, hidden_size=128, intermediate_size=384, num_hidden_layers=4,
              num_attention_heads=4, num_key_value_heads=2, head_dim=32,
              max_position_embeddings=1024, initializer_range=0.1)


def timed(fns, repeats: int) -> list[float]:
    """Median seconds per call of each already warmed-up callable, their calls interleaved."""
    times = [[] for _ in fns]
    for _ in range(repeats):
        for fn, out in zip(fns, times):
            start = time.perf_counter()
            fn()
            out.append(time.perf_counter() - start)
    return [statistics.median(t) for t in times]


def bench_jaxtom(path, prompts, gen_len):
    """(warmed-up callable, greedy tokens) for jaxtom's sampler."""
    from jaxtom import models, sampling

    model = models.from_pretrained(path)

    def run():
        out = sampling.generate(model, prompts, max_new_tokens=gen_len, temperature=0.0)
        assert int(out.lengths.min()) == gen_len
        return out

    return run, run().tokens  # the first call compiles


def bench_transformers(torch_model, prompts, gen_len):
    """(warmed-up callable, greedy tokens) for transformers' generate."""
    import torch

    ids = torch.tensor(prompts)

    def run():
        with torch.no_grad():
            return torch_model.generate(ids, max_new_tokens=gen_len, min_new_tokens=gen_len,
                                        do_sample=False, pad_token_id=0)

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


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--gen-len", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--torch-threads", type=int, default=0,
                        help="torch intra-op threads (0 = torch's default)")
    args = parser.parse_args(argv)
    if args.torch_threads:
        import torch
        torch.set_num_threads(args.torch_threads)

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
    runs = [run_jax, run_hf] + ([run_tunix] if run_tunix else [])
    t_jax, t_hf, *t_tunix = timed(runs, args.repeats)
    t_tunix = t_tunix[0] if t_tunix else None

    result = {"batch": args.batch, "prompt_len": args.prompt_len, "gen_len": args.gen_len,
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
    print(json.dumps(result))
    return result


if __name__ == "__main__":
    main()
