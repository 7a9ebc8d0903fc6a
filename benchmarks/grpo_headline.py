"""The headline GRPO update figure on a batch declared in advance, with its breakdown.

The batch (fixed here, before any measurement): one group of G = 8 samples sharing one
512-token prompt; completion lengths drawn uniformly from 16..512 tokens (seed 0); random
tokens, advantages and reference log-probs; the tiny Qwen3 of benchmarks/grpo_step.py
(rope_theta 1e6 so tunix runs the same model: `parity.py`). Both sides compute the same
gradient of the same objective (token-mean GRPO, k3 KL at 0.01, clip 0.2, AdamW, global-norm
clip 1.0): tunix as its GRPO learner pads the batch ([8, 512] prompt + [8, 512] completion),
jaxtom as its trainer packs it (`trainer.share_prompts`: the prompt once, then every
completion, no padding past a completion's end).

Printed: trained completion tokens per second on each side and their ratio, then the ratio
taken apart:

    speedup = forwarded-token ratio x FLOPs-per-token ratio x per-FLOP efficiency

- forwarded-token ratio: tokens tunix's step runs through the model / jaxtom's (work avoided
  by packing the shared prompt once and not padding);
- FLOPs-per-token ratio: XLA's FLOP count per forwarded token, tunix / jaxtom (attention
  spans, the LM head over scored positions only);
- per-FLOP efficiency: jaxtom's FLOP/s / tunix's on this batch (faster kernels), beside the
  same measure on the dense batch (8 distinct 32+64-token sequences, no sharing), where the
  two sides do the same work.

Each figure is the median of `--repeats` alternating repeats in each of `--processes` fresh
processes; the min-max over the processes is printed beside it. The last line is JSON.

    .venv-bench/bin/python benchmarks/grpo_headline.py [--processes 3 --repeats 10]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
sys.path.insert(0, str(HERE))

import grpo_step  # noqa: E402
try:
    from benchmarks.provenance import Run
except ImportError:  # run as a script: benchmarks/ is on sys.path
    from provenance import Run

G, PROMPT, MAX_COMPLETION, MIN_COMPLETION = 8, 512, 512, 16


def headline_data(vocab: int, seed: int = 0):
    """(prompt [G, P], completion [G, C] zero past each length, adv, ref, lengths)."""
    rng = np.random.default_rng(seed)
    lengths = rng.integers(MIN_COMPLETION, MAX_COMPLETION + 1, G)
    prompt = np.repeat(rng.integers(1, vocab, (1, PROMPT)), G, axis=0).astype(np.int32)
    completion = rng.integers(1, vocab, (G, MAX_COMPLETION)).astype(np.int32)
    live = np.arange(MAX_COMPLETION)[None, :] < lengths[:, None]
    adv = rng.normal(size=G).astype(np.float32)
    ref = (-rng.exponential(7.0, (G, MAX_COMPLETION))).astype(np.float32)
    return prompt, np.where(live, completion, 0), adv, np.where(live, ref, 0.0), lengths


def one_process(repeats: int) -> dict:
    """Both cases, both sides, in this process."""
    path = grpo_step.checkpoint(grpo_step.TINY)
    vocab = grpo_step.TINY["vocab_size"]
    same = grpo_step.same_model(path)
    data = headline_data(vocab)
    j_batch = grpo_step.jaxtom_grouped_batch(data, G)
    headline = [grpo_step.run_jaxtom(path, j_batch), grpo_step.run_tunix(path, data, G)]
    dense_data = grpo_step.make_data(vocab)
    dense_batch = grpo_step.jaxtom_dense_batch(dense_data)
    dense = [grpo_step.run_jaxtom(path, dense_batch), grpo_step.run_tunix(path, dense_data),
             grpo_step.run_jaxtom(path, dense_batch, every_position=True)]
    t_head = grpo_step.timed([s for s, _, _ in headline], repeats)
    t_dense = grpo_step.timed([s for s, _, _ in dense], repeats)
    trained = int(np.sum(data[4]))
    forwarded = {"jaxtom": int(np.prod(j_batch.tokens.shape)), "tunix": G * (PROMPT +
                                                                            MAX_COMPLETION)}
    (_, jm, jl), (_, tm, tl) = headline
    (_, djm, _), (_, dtm, _), (_, dem, _) = dense
    speedup = t_head[1] / t_head[0]
    token_ratio = forwarded["tunix"] / forwarded["jaxtom"]
    flop_ratio = tm["flops"] / jm["flops"]
    return {
        "jaxtom_tokens_per_s": trained / t_head[0], "tunix_tokens_per_s": trained / t_head[1],
        "speedup_vs_tunix": speedup, "forwarded_tokens": forwarded,
        "forwarded_token_ratio": token_ratio, "flops": {"jaxtom": jm["flops"],
                                                        "tunix": tm["flops"]},
        "flops_per_token_ratio": flop_ratio / token_ratio,
        "per_flop_efficiency": speedup / flop_ratio,
        "dense_speedup_vs_tunix": t_dense[1] / t_dense[0],
        "dense_per_flop_efficiency": (t_dense[1] / t_dense[0]) / (dtm["flops"] / djm["flops"]),
        # the same program work on both sides (jaxtom's LM head on every position too)
        "dense_same_flops_speedup": t_dense[1] / t_dense[2],
        "dense_same_flops_flop_ratio": dtm["flops"] / dem["flops"],
        "dense_same_flops_per_flop_efficiency": (t_dense[1] / t_dense[2])
        / (dtm["flops"] / dem["flops"]),
        "first_loss_rel_diff": abs(jl - tl) / max(abs(tl), 1e-12),
        "trained_completion_tokens": trained, **same}


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--processes", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--save", action="store_true",
                        help="also write the JSON line to benchmarks/results/")
    args = parser.parse_args(argv)
    record = Run("grpo_headline")
    try:
        import tunix  # noqa: F401
    except ImportError:
        raise SystemExit("grpo_headline.py compares against tunix: run it in the bench venv "
                         "(.venv-bench/bin/pip install -e '.[bench]')") from None
    if args.child:
        print(json.dumps(one_process(args.repeats)))
        return {}
    runs = []
    for i in range(args.processes):
        done = subprocess.run([sys.executable, __file__, "--child", "--repeats",
                               str(args.repeats)], capture_output=True, text=True,
                              env=dict(os.environ), check=False)
        if done.returncode:
            raise SystemExit(f"process {i} failed:\n{done.stderr[-3000:]}")
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
        print(f"process {i}: speedup {runs[-1]['speedup_vs_tunix']:.2f}x", flush=True)
    keys = ["jaxtom_tokens_per_s", "tunix_tokens_per_s", "speedup_vs_tunix",
            "forwarded_token_ratio", "flops_per_token_ratio", "per_flop_efficiency",
            "dense_speedup_vs_tunix", "dense_per_flop_efficiency", "dense_same_flops_speedup",
            "dense_same_flops_flop_ratio", "dense_same_flops_per_flop_efficiency"]
    result = {"batch": f"G={G}, one {PROMPT}-token prompt, completions uniform "
                       f"{MIN_COMPLETION}..{MAX_COMPLETION} (seed 0), tiny Qwen3",
              "processes": args.processes, "repeats": args.repeats,
              "trained_completion_tokens": runs[0]["trained_completion_tokens"],
              "forwarded_tokens": runs[0]["forwarded_tokens"], "flops": runs[0]["flops"],
              "logprob_max_abs_diff": max(r["logprob_max_abs_diff"] for r in runs),
              "grad_norm_rel_diff": max(r["grad_norm_rel_diff"] for r in runs),
              "first_loss_rel_diff": max(r["first_loss_rel_diff"] for r in runs)}
    for k in keys:
        values = [r[k] for r in runs]
        result[k] = statistics.median(values)
        result[k + "_min_max"] = [min(values), max(values)]
    r = result
    print(f"\n{r['batch']}: {r['trained_completion_tokens']} trained completion tokens, "
          f"same model (log-probs within {r['logprob_max_abs_diff']:.1e})")
    print(f"  jaxtom {r['jaxtom_tokens_per_s']:9.0f} trained tok/s   tunix "
          f"{r['tunix_tokens_per_s']:9.0f}   speedup {r['speedup_vs_tunix']:.2f}x "
          f"(min-max over processes {r['speedup_vs_tunix_min_max'][0]:.2f}-"
          f"{r['speedup_vs_tunix_min_max'][1]:.2f})")
    print(f"  = forwarded tokens {r['forwarded_token_ratio']:.2f}x fewer "
          f"({r['forwarded_tokens']['jaxtom']} vs {r['forwarded_tokens']['tunix']})"
          f" x FLOPs per token {r['flops_per_token_ratio']:.2f}x"
          f" x per-FLOP efficiency {r['per_flop_efficiency']:.2f}x")
    print(f"  dense batch (same rows both sides): {r['dense_speedup_vs_tunix']:.2f}x, per-FLOP "
          f"efficiency {r['dense_per_flop_efficiency']:.2f}x (jaxtom's LM head on completion "
          f"positions only); with its LM head on every position as tunix's "
          f"(XLA FLOPs tunix/jaxtom {r['dense_same_flops_flop_ratio']:.3f}): "
          f"{r['dense_same_flops_speedup']:.2f}x = per-FLOP efficiency "
          f"{r['dense_same_flops_per_flop_efficiency']:.2f}x "
          f"({r['dense_same_flops_per_flop_efficiency_min_max'][0]:.2f}-"
          f"{r['dense_same_flops_per_flop_efficiency_min_max'][1]:.2f})")
    record.emit(result, save=args.save)
    return result


if __name__ == "__main__":
    main()
