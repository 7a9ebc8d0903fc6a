"""Where a MindZero SSRL step of the CPU default spends its time, and what each way of doing
the same update costs on the same batch.

One step of `configs/mindzero_gridworld_tiny.py` (16 prompts x 8 samples, up to 96 tokens) is
taken apart: sampling, parsing and the ELBO reward, packing, host -> device, the update, and
device -> host. The model is the warm-up model of a run directory (`--run`, where
`jaxtom mindzero run` or `jaxtom train` left `warmup/`), so completion lengths are a trained
policy's; without `--run` it is a random initialisation (every completion runs to the cap).

Then the update alone, on that one rollout, under each variant, alternating, `--repeats`
times each (after one compile each), with XLA's FLOP and byte counts:

- `shared`: the config as it is (`trainer.share_prompts`: each group's prompt packed once,
  its 8 completions after it in one row; dense attention with causal query blocks);
- `shared_blockwise`: the same rows under blockwise attention (`model.attention=blockwise`,
  128-token blocks), which skips key blocks no query of a block can see (the completions of
  a group do not see each other);
- `unshared`: every sample its own sequence (prompt + completion), first-fit packed into
  `trainer.row_len`-token rows;
- `shared_fixed_N` for each N of `--fixed-rows`: shared prompts in rows of a fixed N tokens
  (`trainer.shared_fixed_rows`), a group going on in another row, its prompt packed again,
  where it does not fit: shorter rows, so each query's scores span fewer keys, for more
  prompt copies.

`--steps N --layout NAME` then runs N whole steps (sample, reward, pack, update) of the
default and of that layout side by side from the same model, the two alternating step by
step with the same tasks and keys, each training its own copy: the paired A/B of a step as
the trainer runs it.

`--profile` adds where the default update's op time goes, by the decoder's named scopes
(`benchmarks/op_profile.py`: attention, q/k/v, o_proj, MLP, LM head, other).

The three compute the same loss on the same samples; their float sums differ in order, so
only `shared` reproduces the default's figures to the bit. The last line is JSON.

    python benchmarks/ssrl_step.py --run runs/mindzero_gridworld_tiny [--repeats 5] [--save]
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import tempfile
import time
from pathlib import Path

import jax
import numpy as np
from flax import nnx

from jaxtom.config import load_config
from jaxtom.models.orbax_io import restore_params
from jaxtom.mindzero.goals_text import prepare
from jaxtom.rl.step import Learner
from jaxtom.rl.trainer import pack_rollout

try:
    from benchmarks.op_profile import scope_times
    from benchmarks.provenance import Run
except ImportError:  # run as a script: benchmarks/ is on sys.path
    from op_profile import scope_times
    from provenance import Run

CONFIG = "configs/mindzero_gridworld_tiny.py"


def with_model_config(model, **changes):
    """`model` with its config's training-forward settings replaced (same parameters)."""
    graphdef, state = nnx.split(model)
    clone = nnx.merge(graphdef, state)
    clone.config = dataclasses.replace(model.config, **changes)
    return clone


def cost(learner, state, batch) -> dict:
    compiled = learner.program(state, batch).lower(state, batch).compile()
    analysis = compiled.cost_analysis()
    analysis = analysis[0] if isinstance(analysis, list) else analysis
    return {"gflop": round(float(analysis.get("flops", 0.0)) / 1e9, 2),
            "gbytes": round(float(analysis.get("bytes accessed", 0.0)) / 1e9, 2)}


def paired_steps(setups, names, prep, config, model, rollout_fn, args) -> dict:
    """Whole steps of each layout in `names`, alternating, the same tasks and keys per step;
    each layout trains its own state from `model`. Step seconds exclude the first (compiling)
    step of each and every step that built a new update program."""
    rng = np.random.default_rng(args.seed + 1)
    states = {n: setups[n][0].init_state(model, seed=config.trainer.seed) for n in names}
    seconds: dict[str, list[float]] = {n: [] for n in names}
    rewards: dict[str, list[float]] = {n: [] for n in names}
    for i in range(args.steps + 1):
        picked = rng.choice(len(prep.ssrl_tasks), config.trainer.prompts_per_step,
                            replace=False)
        tasks = [dict(prep.ssrl_tasks[j], row=r) for r, j in enumerate(picked)]
        key = jax.random.fold_in(jax.random.key(args.seed + 1), i)
        for n in names:
            ln, tcfg = setups[n][0], setups[n][4]
            programs = ln.program_count
            began = time.perf_counter()
            rollout = rollout_fn(ln.sampling_model(states[n]), tasks, key, i)
            placed = ln.put_global_batch(pack_rollout(rollout, tcfg))
            states[n], metrics = ln.update(states[n], placed)
            jax.block_until_ready(metrics)
            if i and ln.program_count == programs:
                seconds[n].append(time.perf_counter() - began)
            rewards[n].append(float(rollout.metrics.get("reward_mean", float("nan"))))
    base = statistics.median(seconds[names[0]])
    out = {n: {"step_seconds": round(statistics.median(v), 4),
               "min_max": [round(min(v), 4), round(max(v), 4)], "timed_steps": len(v),
               "speedup_vs_shared": round(base / statistics.median(v), 3),
               "reward_mean_last": round(float(np.mean(rewards[n][-5:])), 4)}
           for n, v in seconds.items()}
    print(f"\n{args.steps} whole steps, paired (median step seconds, min-max):")
    for n, r in out.items():
        print(f"  {n:17s} {r['step_seconds']:.3f} s ({r['min_max'][0]:.3f}-"
              f"{r['min_max'][1]:.3f}, {r['timed_steps']} steps without a compile), "
              f"{r['speedup_vs_shared']:.2f}x; mean reward of the last 5 steps "
              f"{r['reward_mean_last']:.3f}")
    return out


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", default="", help="run directory holding warmup/ (the model)")
    parser.add_argument("--config", default=CONFIG)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=0,
                        help="whole steps of the paired A/B (0: none)")
    parser.add_argument("--fixed-rows", default="384,256",
                        help="comma-separated row lengths of the shared_fixed_N layouts")
    parser.add_argument("--layout", default="shared_fixed_384",
                        help="the update layout the A/B sets against the default (`shared`)")
    parser.add_argument("--profile", action="store_true",
                        help="also profile the default update's ops by scope")
    parser.add_argument("--save", action="store_true",
                        help="also write the JSON line to benchmarks/results/")
    args = parser.parse_args(argv)
    record = Run("ssrl_step")
    workdir = args.run or tempfile.mkdtemp(prefix="jaxtom-ssrl-step-")
    config = load_config(args.config, [f"trainer.workdir={workdir}"])
    prep = prepare(config, Path(workdir), None)
    model = prep.model
    if args.run:
        model = restore_params(model, Path(args.run) / "warmup")
    rollout_fn = prep.ssrl_rollout(config, model)
    rng = np.random.default_rng(args.seed)
    picked = rng.choice(len(prep.ssrl_tasks), config.trainer.prompts_per_step, replace=False)
    tasks = [dict(prep.ssrl_tasks[i], row=r) for r, i in enumerate(picked)]

    learner = Learner(model, config.step, total_steps=config.trainer.total_steps)
    state = learner.init_state(model, seed=config.trainer.seed)
    key = jax.random.key(args.seed)
    parts: dict[str, list[float]] = {}

    def timed(name, fn, *a):
        began = time.perf_counter()
        out = jax.block_until_ready(fn(*a))
        parts.setdefault(name, []).append(time.perf_counter() - began)
        return out

    # the step's parts, as the trainer runs them (first call compiles; repeats are timed)
    for i in range(args.repeats + 1):
        rollout = timed("rollout", rollout_fn, learner.sampling_model(state), tasks,
                        jax.random.fold_in(key, i), 0)
        for name in ("sample", "reward"):
            parts.setdefault(name, []).append(rollout.metrics[f"time/{name}_seconds"])
        batch = timed("pack", pack_rollout, rollout, config.trainer)
        placed = timed("to_device", learner.put_global_batch, batch)
        # the update donates its state: time it on a copy, so every repeat starts alike
        copy = jax.tree.map(lambda x: x.copy() if hasattr(x, "copy") else x, state)
        programs = learner.program_count
        _, metrics = timed("update", learner.update, copy, placed)
        if learner.program_count > programs:  # a new batch shape: this update compiled
            parts.setdefault("update_compiling", []).append(parts["update"].pop())
        timed("from_device", jax.device_get, metrics)
    compiling = parts.pop("update_compiling", [])
    step = {k: statistics.median(v[1:] if k != "update" else v) if v else float("nan")
            for k, v in parts.items()}
    lengths = [len(s) - p for s, p in zip(rollout.sequences, rollout.prompt_lens)]
    print(f"one SSRL step, {len(lengths)} samples, mean completion {np.mean(lengths):.1f} "
          f"tokens (median of {args.repeats}, after one compile):")
    for k in ("sample", "reward", "pack", "to_device", "update", "from_device"):
        print(f"  {k:12s} {step[k]:7.3f} s")
    print(f"  {len(compiling)} of {args.repeats + 1} updates compiled a new batch shape "
          f"(median {statistics.median(compiling or [float('nan')]):.1f} s with the compile); "
          f"the update's figure is the median of the {len(parts['update'])} that did not")

    # the update alone under each variant, on the last rollout's samples
    variants = {
        "shared": (model, config.trainer),
        "shared_blockwise": (with_model_config(model, attention="blockwise",
                                               attention_block=128), config.trainer),
        "unshared": (model, dataclasses.replace(
            config.trainer, share_prompts=False,
            row_len=prep.row_len(config.trainer.max_new_tokens))),
        **{f"shared_fixed_{n}": (model, dataclasses.replace(
            config.trainer, shared_fixed_rows=True, row_len=int(n)))
           for n in args.fixed_rows.split(",")},
    }
    if args.layout not in variants or args.layout == "shared":
        others = sorted(set(variants) - {"shared"})
        parser.error(f"--layout {args.layout!r}: expected one of {others}")
    setups = {}
    for name, (m, tcfg) in variants.items():
        ln = Learner(m, config.step, total_steps=config.trainer.total_steps)
        st = ln.init_state(m, seed=config.trainer.seed)
        b = pack_rollout(rollout, tcfg)
        placed = ln.put_global_batch(b)
        info = {"rows": list(b.shape), "tokens": int(np.asarray(b.segment_ids > 0).sum()),
                **cost(ln, st, placed)}
        setups[name] = (ln, st, b, info, tcfg)
    times: dict[str, list[float]] = {name: [] for name in variants}
    for r in range(args.repeats + 1):
        for name, (ln, st, b, _, _) in setups.items():
            copy = jax.tree.map(lambda x: x.copy() if hasattr(x, "copy") else x, st)
            placed = jax.block_until_ready(ln.put_global_batch(b))
            began = time.perf_counter()
            jax.block_until_ready(ln.update(copy, placed))
            if r:  # the first round compiles
                times[name].append(time.perf_counter() - began)
    base = statistics.median(times["shared"])
    print("\nthe update alone, same samples (median, min-max):")
    result_variants = {}
    for name, (_, _, _, info, _) in setups.items():
        med = statistics.median(times[name])
        result_variants[name] = {**info, "seconds": round(med, 4),
                                 "min_max": [round(min(times[name]), 4),
                                             round(max(times[name]), 4)],
                                 "speedup_vs_shared": round(base / med, 3)}
        print(f"  {name:17s} rows {info['rows']}, {info['tokens']} tokens, "
              f"{info['gflop']} GFLOP, {info['gbytes']} GB accessed: {med:.3f} s "
              f"({min(times[name]):.3f}-{max(times[name]):.3f}), {base / med:.2f}x")
    paired = paired_steps(setups, ("shared", args.layout), prep, config, model, rollout_fn,
                          args) if args.steps else None
    profile = None
    if args.profile:
        ln, st, b, _, _ = setups["shared"]
        placed = ln.put_global_batch(b)
        profile = scope_times(ln.program(st, placed), lambda: (
            jax.tree.map(lambda x: x.copy() if hasattr(x, "copy") else x, st), placed))
        print(f"\nthe default update's op time by scope ({profile['op_ms_total']:.0f} ms of "
              "ops per update, summed over threads):")
        for scope, ms in sorted(profile["op_ms"].items(), key=lambda kv: -kv[1]):
            print(f"  {scope:10s} {ms:8.1f} ms  {profile['share'][scope]:6.1%}")
    return record.emit({
        "config": args.config, "run": Path(args.run).name if args.run else None,
        "repeats": args.repeats,
        "samples": len(lengths), "mean_completion_tokens": round(float(np.mean(lengths)), 2),
        "step_seconds": {k: round(v, 4) for k, v in step.items()},
        "updates_compiling": len(compiling),
        "update_with_compile_seconds": round(statistics.median(compiling or [float("nan")]), 3),
        "update_variants": result_variants, "paired_steps": paired,
        "update_profile": profile}, save=args.save)


if __name__ == "__main__":
    main()
