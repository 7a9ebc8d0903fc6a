"""How many programs a ragged GRPO run compiles, per program name and per iteration, counted
from JAX's own compile log, on two paths:

  * `grpo`: `grpo_iteration.py`'s tiny model on its compacted path (its jaxtom side's
    `share_prompts`, `shared_fixed_rows` and `compact_rows`: prompts packed once per group in
    rows of a fixed length, finished rows dropped from decoding),
    4 prompts x G = 8, completions up to 512 tokens ending at the 24 most frequent ids, so
    their lengths vary from step to step;
  * `paper`: a paper config (default `configs/mindzero_gridworld_qwen3_4b.py`) scaled down
    as `tests/commands/test_every_config.py` scales it, on its stand-in checkpoint, as
    `jaxtom train` runs it: 2 processes x 4 simulated CPU devices (`--processes`), so the
    host gathers between processes run too. Each process logs its own compiles; the
    report is process 0's, and the bounds are checked on every process.

Why: a program recompiled for every new shape costs minutes per compile at the papers'
sizes. Shapes that vary from step to step are bucketed (the sampler's rows, prompt chunks,
caches and compaction segments; the update's rows and row lengths; the gathered arrays), so
a run should compile each program once per bucket it meets and meet its buckets in its first
iterations. The bounds checked: during the steps no program compiles twice with the same
argument shapes and shardings, and nothing compiles after iteration `--settle` (3).
Iteration 0 is what runs before the first rollout (loading, the train state, the stop-id
choice); "end" is what runs after the last step (the final checkpoint and model export);
both are reported, outside the bounds. The repeat check reads names and argument shapes
only, so it is stricter than one compile per bucket where a static setting is not an
argument (the update's scoring width: a new width for the same rows counts as a repeat) and
blind to anonymous functions, which all log as `<lambda>` (left out of it).

    python benchmarks/compiles.py [--paths grpo,paper] [--grpo-steps 30] [--paper-steps 5]
        [--paper-config configs/mindzero_gridworld_qwen3_4b.py] [--processes 2]

The last line is one JSON object: per path the counts per program and per iteration, the
repeats and late compiles found, and `bounds_hold`; with the JAX version, the commit, the
CPU model and the load average.
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

try:
    from benchmarks.provenance import Run
except ImportError:  # run as a script: benchmarks/ is on sys.path
    from provenance import Run

ROOT = Path(__file__).resolve().parents[1]
_COMPILING = re.compile(r"Compiling (\S+) with global shapes and types (.*)\. Argument "
                        r"mapping: (.*)\.$", re.S)


class CompileLog(logging.Handler):
    """JAX's "Compiling NAME with global shapes ..." records, each tagged with the
    iteration the run was in (`iteration`, set by the caller)."""

    def __init__(self):
        super().__init__()
        self.iteration = 0
        self.events: list[tuple[int, str, str]] = []  # (iteration, name, shapes + mapping)

    def emit(self, record):
        m = _COMPILING.match(record.getMessage())
        if m:
            name = re.sub(r"^jit\((.*)\)$", r"\1", m.group(1))
            self.events.append((self.iteration, name, m.group(2) + " | " + m.group(3)))

    def start(self) -> "CompileLog":
        import jax
        jax_logger = logging.getLogger("jax")
        self._before = jax_logger.propagate, jax.config.jax_log_compiles
        jax_logger.addHandler(self)
        jax_logger.propagate = False  # counted here, not printed
        jax.config.update("jax_log_compiles", True)
        return self

    def stop(self) -> None:
        import jax
        jax_logger = logging.getLogger("jax")
        jax_logger.removeHandler(self)
        jax_logger.propagate, log_compiles = self._before
        jax.config.update("jax_log_compiles", log_compiles)


def summarise(events, settle: int) -> dict:
    """Counts per program and per iteration, and what breaks the bounds: a program compiled
    twice for the same shapes and shardings, or any compile after iteration `settle`."""
    per_program = collections.Counter(name for _, name, _ in events)
    per_iteration: dict = collections.defaultdict(collections.Counter)
    for it, name, _ in events:
        per_iteration[it][name] += 1
    same = collections.Counter((name, sig) for _, name, sig in events)
    stepped = collections.Counter((name, sig) for it, name, sig in events
                                  if isinstance(it, int) and it >= 1 and name != "<lambda>")
    repeats = collections.Counter(name for (name, _), n in stepped.items() if n > 1
                                  for _ in range(n - 1))
    steps = [it for it, _, _ in events if isinstance(it, int)]
    late = collections.Counter(f"{name}@{it}" for it, name, _ in events
                               if isinstance(it, int) and it > settle)
    order = sorted(per_iteration, key=lambda it: (not isinstance(it, int), str(it).zfill(6)))
    return {"per_program": dict(per_program.most_common()),
            "buckets": dict(collections.Counter(name for name, _ in same).most_common()),
            "per_iteration": {str(it): dict(per_iteration[it].most_common()) for it in order},
            "last_compile_iteration": max(steps, default=0),
            "repeats": dict(repeats), "late": dict(late),
            "late_shapes": [[name, it, sig.split(" | ")[0][-300:]] for it, name, sig in events
                            if isinstance(it, int) and it > settle],
            "bounds_hold": not repeats and not late}


# ---- the grpo_iteration path ----------------------------------------------------------------

def run_grpo(steps: int, max_len: int, stop_ids: int, settle: int, **sizes) -> dict:
    """`grpo_iteration.py`'s jaxtom side, compacted path, for `steps` iterations of
    completions up to `max_len` tokens ending at the model's `stop_ids` most frequent ids
    (its tiny model, with `sizes` replacing entries of its config)."""
    if str(ROOT / "benchmarks") not in sys.path:
        sys.path.insert(0, str(ROOT / "benchmarks"))
    import grpo_iteration as gi

    from jaxtom import models
    from jaxtom.rl.trainer import CompletionRollout, Trainer

    lengths: list[list[int]] = []
    log = CompileLog().start()
    try:
        shape = gi.tiny_shape(max_len, **sizes)
        shape.stops = gi.choose_stop_ids(models.from_pretrained(shape.path), shape, stop_ids)

        def scored(completions, records):
            lengths.append([len(c) for c in completions])
            return gi.reward(completions, shape.vocab)

        class Counted(CompletionRollout):
            def __call__(self, model, tasks, key, step):
                log.iteration = step + 1
                return super().__call__(model, tasks, key, step)

        cfg, step_cfg = gi.jaxtom_configs(shape, steps, share=True, compact=True)
        start = time.perf_counter()
        Trainer(models.from_pretrained(shape.path), [{"prompt": p} for p in shape.prompts],
                Counted(scored, cfg), step_cfg, cfg).run()
    finally:
        log.stop()
    out = summarise(log.events, settle)
    out.update(seconds=time.perf_counter() - start, iterations=steps,
               completion_len_range=[min(min(x) for x in lengths),
                                     max(max(x) for x in lengths)],
               mean_completion_len_range=[min(sum(x) / len(x) for x in lengths),
                                          max(sum(x) / len(x) for x in lengths)])
    return out


# ---- the paper-config path --------------------------------------------------------------------

def paper_overrides(config: str, standin: Path, workdir: Path, steps: int,
                    max_new: int) -> list[str]:
    """The test suite's scaled-down sizes for `config`, `steps` steps of completions up to
    `max_new` tokens, no warm-up (a random stand-in's completions then end at random
    lengths), nothing saved or evaluated between."""
    sys.path.insert(0, str(ROOT))
    from tests.commands.test_every_config import _overrides
    out = [a for a in _overrides(config, standin, workdir)
           if not a.startswith(("trainer.total_steps=",
                                "trainer.checkpoint_every=", "trainer.eval_every=",
                                "trainer.max_new_tokens="))]
    out += [f"trainer.total_steps={steps}",
            f"trainer.checkpoint_every={steps}", "trainer.eval_every=0",
            f"trainer.max_new_tokens={max_new}"]
    if Path(config).stem.startswith("mindzero"):
        out += ["mindzero.warmup.steps=0", "mindzero.warmup.min_lead=0",
                "mindzero.warmup.min_distinct=0", "mindzero.warmup.retries=0",
                "mindzero.warmup.check_at=0", "mindzero.data.val_episodes=0"]
    return out


WORKER = """
import json, sys
sys.path.insert(0, {root!r}); sys.path.insert(0, {bench!r})
from compiles import CompileLog, summarise
log = CompileLog().start()
from jaxtom.commands.train import start_distributed, train
from jaxtom.config import load_config
from jaxtom.rl import trainer as trainer_lib
start_distributed()
inner = trainer_lib.Trainer.train_step
def counted(self, state, tasks, step):
    log.iteration = step + 1
    out = inner(self, state, tasks, step)
    if step + 1 == self.cfg.total_steps:
        log.iteration = "end"  # the final checkpoint and model export, after the last step
    return out
trainer_lib.Trainer.train_step = counted
config = load_config(sys.argv[1], json.loads(sys.argv[2]))
train(config, progress=False)
json.dump(summarise(log.events, int(sys.argv[4])), open(sys.argv[3], "w"))
"""


def run_paper(config: str, steps: int, max_new: int, processes: int, devices: int,
              settle: int) -> dict:
    sys.path.insert(0, str(ROOT))
    import socket

    from tests.commands.standin import write_standin, write_vl_standin
    tmp = Path(tempfile.mkdtemp(prefix="compiles-paper-"))
    standin = tmp / "standin"
    write_standin(standin)
    if "qwen3vl" in Path(config).stem:
        write_vl_standin(str(standin) + "_vl")
    overrides = paper_overrides(config, standin, tmp / "run", steps, max_new)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    script = WORKER.format(root=str(ROOT), bench=str(ROOT / "benchmarks"))
    procs, outs = [], []
    start = time.perf_counter()
    for i in range(processes):
        env = {**os.environ, "JAX_PLATFORMS": "cpu",
               "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices // processes}",
               "JAX_CPU_COLLECTIVES_IMPLEMENTATION": "gloo"}
        if processes > 1:
            env.update(JAX_COORDINATOR_ADDRESS=f"127.0.0.1:{port}",
                       JAX_NUM_PROCESSES=str(processes), JAX_PROCESS_ID=str(i))
        outs.append(tmp / f"compiles-{i}.json")
        procs.append(subprocess.Popen(
            [sys.executable, "-c", script, config, json.dumps(overrides), str(outs[-1]),
             str(settle)], env=env, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True))
    for p in procs:
        _, err = p.communicate(timeout=3600)
        if p.returncode:
            raise RuntimeError(f"paper run failed (exit {p.returncode}):\n{err[-4000:]}")
    results = [json.loads(o.read_text()) for o in outs]
    out = dict(results[0])
    # the scratch directory named as $TMP: the JSON holds no path of this machine
    out.update(config=config, overrides=[o.replace(str(tmp), "$TMP") for o in overrides], processes=processes, devices=devices,
               iterations=steps, seconds=time.perf_counter() - start,
               bounds_hold=all(r["bounds_hold"] for r in results),
               per_process_bounds_hold=[r["bounds_hold"] for r in results])
    return out


def print_path(name: str, r: dict) -> None:
    print(f"{name}: {r['iterations']} iterations in {r['seconds']:.0f} s; bounds "
          f"{'hold' if r['bounds_hold'] else 'broken'} (last compile in iteration "
          f"{r['last_compile_iteration']})")
    print("  per program: " + ", ".join(f"{k} x{v}" for k, v in r["per_program"].items()))
    for it, counts in r["per_iteration"].items():
        print(f"  iteration {it:>3}: " + ", ".join(f"{k} x{v}" for k, v in counts.items()))
    if r["repeats"]:
        print(f"  compiled again for the same shapes: {r['repeats']}")
    if r["late"]:
        print(f"  compiled late: {r['late']}")


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--paths", default="grpo,paper")
    ap.add_argument("--settle", type=int, default=3,
                    help="the last iteration in which a program may compile")
    ap.add_argument("--grpo-steps", type=int, default=30)
    ap.add_argument("--max-len", type=int, default=512)
    ap.add_argument("--stop-ids", type=int, default=24)
    ap.add_argument("--paper-config", default="configs/mindzero_gridworld_qwen3_4b.py")
    ap.add_argument("--paper-steps", type=int, default=5)
    ap.add_argument("--paper-max-new", type=int, default=96,
                    help="completion cap of the paper path (the test suite's is 12: too short "
                         "to decode in more than one segment)")
    ap.add_argument("--processes", type=int, default=2)
    ap.add_argument("--devices", type=int, default=8)
    ap.add_argument("--save", action="store_true",
                    help="also write the JSON line to benchmarks/results/")
    args = ap.parse_args(argv)
    record = Run("compiles")
    paths = args.paths.split(",")
    if not paths or set(paths) - {"grpo", "paper"}:
        ap.error(f"--paths {args.paths!r}: expected a comma-separated subset of grpo,paper")
    result = {}
    if "paper" in paths:  # first: its processes start before this one holds a JAX backend
        result["paper"] = run_paper(args.paper_config, args.paper_steps, args.paper_max_new,
                                    args.processes, args.devices, args.settle)
        print_path("paper", result["paper"])
    if "grpo" in paths:
        result["grpo"] = run_grpo(args.grpo_steps, args.max_len, args.stop_ids, args.settle)
        print_path("grpo", result["grpo"])
    result = {"settle": args.settle,
              "bounds_hold": all(r["bounds_hold"] for r in result.values()), **result}
    return record.emit(result, save=args.save)


if __name__ == "__main__":
    main()
