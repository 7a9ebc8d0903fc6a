"""How many programs a ragged GRPO run compiles: the sampler's prefill and decode and the
update, counted from JAX's own compile log over a run whose prompt and completion lengths vary
from step to step, as GRPO's do.

Why: a program recompiled for every new shape costs seconds to minutes per step at the
papers' sizes; the sampler buckets rows, prompt and cache lengths and the update pads rows to
one length per run, so the counts should stay at a few whatever the lengths. This measures
them instead of asserting them.

Default run: `configs/mindzero_gridworld_tiny.py` from a random initialisation (no warm-up, so
completions end at random lengths up to the budget), `--steps` SSRL steps of 16 prompts x 8
samples; prompts are the observation texts of different episodes and steps, so their lengths
vary too. The last line is one JSON object with the counts.

    python benchmarks/compiles.py [--steps 20] [--config PATH] [section.field=value ...]
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import re
import tempfile
import time

import jax

PROGRAMS = ("prefill", "decode", "update")
_COMPILING = re.compile(r"Compiling jit\((\w+)\)")


class CompileLog(logging.Handler):
    """Counts JAX's "Compiling jit(NAME) ..." records by NAME."""

    def __init__(self):
        super().__init__()
        self.counts: collections.Counter = collections.Counter()

    def emit(self, record):
        m = _COMPILING.match(record.getMessage())
        if m:
            self.counts[m.group(1)] += 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--config", default="configs/mindzero_gridworld_tiny.py")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()

    from jaxtom.commands.train import train
    from jaxtom.config import load_config

    workdir = tempfile.mkdtemp(prefix="jaxtom-compiles-")
    overrides = [f"trainer.workdir={workdir}", f"trainer.total_steps={args.steps}",
                 f"step.total_steps={args.steps}", f"trainer.checkpoint_every={args.steps}",
                 "trainer.eval_every=0", "trainer.progress=false", "mindzero.warmup.steps=0",
                 "mindzero.warmup.min_lead=0", "mindzero.warmup.min_distinct=0",
                 "mindzero.warmup.retries=0", "mindzero.warmup.check_at=0",
                 "mindzero.data.val_episodes=0", *args.overrides]
    config = load_config(args.config, overrides)
    log = CompileLog()
    jax_logger = logging.getLogger("jax")
    jax_logger.addHandler(log)
    jax_logger.propagate = False  # counted here, not printed
    jax.config.update("jax_log_compiles", True)
    start = time.perf_counter()
    summary = train(config, progress=False)
    seconds = time.perf_counter() - start
    jax.config.update("jax_log_compiles", False)

    rows = [json.loads(line) for line in open(f"{workdir}/ssrl/metrics.jsonl")]
    lengths = [r.get("completion_tokens") for r in rows if "completion_tokens" in r]
    prompts = [r["prompt_tokens"] for r in rows if "prompt_tokens" in r]
    counts = {name: log.counts.get(name, 0) for name in PROGRAMS}
    print(f"{args.config}: {summary.get('step')} steps in {seconds:.0f} s; mean completion "
          f"length per step {min(lengths, default=0):.1f}-{max(lengths, default=0):.1f} tokens"
          + (f", mean prompt length {min(prompts):.1f}-{max(prompts):.1f}" if prompts else ""))
    for name in PROGRAMS:
        print(f"  {name:8s} compiled {counts[name]} time(s)")
    others = sum(log.counts.values()) - sum(counts.values())
    top = [(n, c) for n, c in log.counts.most_common() if n not in PROGRAMS][:8]
    print(f"  plus {others} other small programs (set-up and host-side ops: episodes, "
          "likelihood tables, sampling keys); most: " + ", ".join(f"{n} x{c}" for n, c in top))
    print(json.dumps({"config": args.config, "steps": summary.get("step"), "seconds": seconds,
                      "compiles": counts, "other_compiles": others,
                      "other_compiles_top": dict(top),
                      "completion_tokens_range": [min(lengths, default=0),
                                                  max(lengths, default=0)],
                      "prompt_tokens_range": [min(prompts), max(prompts)] if prompts else None}))


if __name__ == "__main__":
    main()
