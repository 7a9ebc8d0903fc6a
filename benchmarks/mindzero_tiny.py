"""MindZero's main job over seeds (issue 33): each seed's held-out figures, the summary over
seeds, the helper pooled over the seeds' episodes, and the kept-model check.

Reads runs made by the README's command, one per seed, with every SSRL checkpoint kept so
the kept model can be judged against the others it was chosen from:

    jaxtom mindzero run configs/mindzero_gridworld_tiny.py trainer.seed=S \\
        trainer.workdir=runs/mz_S trainer.checkpoint_every=25 trainer.keep_checkpoints=9

(checkpointing does not change the numbers). For each run it reads `results.json` (the
held-out goal table and the helper speedups, written by the run itself), then scores the
warm-up and every saved SSRL checkpoint on the same held-out queries, so the table shows
where the kept model (the last; with `mindzero.data.keep=best` the validation monitor's
choice) stands against the best held-out checkpoint, in paired SE. Ends with one JSON line
of the figures.

    python benchmarks/mindzero_tiny.py runs/mz_0 runs/mz_1 ...
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

import jax
import jax.numpy as jnp
import numpy as np
try:
    from benchmarks.provenance import Run
except ImportError:  # run as a script: benchmarks/ is on sys.path
    from provenance import Run


def trainer_checkpoint_model(model, state_dir: Path):
    """`model` with the trainable parameters of a trainer checkpoint (`jaxtom.rl.checkpoint`
    saves the leaves of (step, params, opt_state, rng) in order, so params follow the step)."""
    import orbax.checkpoint as ocp
    from flax import nnx
    saved = ocp.StandardCheckpointer().restore(str(state_dir.absolute()))
    leaves = [saved[k] for k in sorted(saved)]
    graph, params, rest = nnx.split(model, nnx.Param, ...)
    mine, tree = jax.tree.flatten(params)
    theirs = leaves[1:1 + len(mine)]
    if [x.shape for x in mine] != [x.shape for x in theirs]:
        raise ValueError(f"{state_dir}: parameter shapes differ from the run's model")
    restored = [jnp.asarray(b, a.dtype) for a, b in zip(mine, theirs)]
    return nnx.merge(graph, jax.tree.unflatten(tree, restored), rest)


def nnx_params(model):
    from flax import nnx
    return nnx.state(model, nnx.Param)


def score_candidates(run: Path) -> dict:
    """Held-out log score of the warm-up (step 0) and of every saved SSRL checkpoint, each
    with its paired SE against the kept model, on the run's own held-out queries."""
    from jaxtom.config import load_config
    from jaxtom.mindzero import evaluate as ev
    from jaxtom.mindzero.observation import HostEpisodes
    from jaxtom.mindzero.goals_text import env_params, load_model, make_episodes
    from jaxtom.eval import metrics
    cfg = load_config_from_run(run, load_config)
    _, test = make_episodes(cfg)
    test = test.take(np.arange(min(cfg.mindzero.eval.episodes, len(test))))
    view = HostEpisodes.from_episodes(test)
    rows = ev.steps_to_score(view, cfg.mindzero.eval.stride)
    exact = ev.reference_beliefs(view, rows, env_params(cfg), cfg.trainer.seed,
                                 cfg.mindzero.data.num_particles)["exact"]
    d = cfg.mindzero.data
    warm, codec = load_model(cfg, run / "warmup")
    models = {0: warm}
    for state in sorted((run / "ssrl" / "checkpoints").glob("*/state")):
        models[int(state.parent.name)] = trainer_checkpoint_model(warm, state)
    if (run / "best.json").exists():  # a best-model rule (data.keep="best") chose
        kept = json.loads((run / "best.json").read_text())["step"]
        kept_dir = run / f"best_{kept}" if kept else None
    else:  # the run kept its last model (data.keep="last")
        kept, kept_dir = max(models), run / "checkpoint"
    if kept_dir is not None:
        kept_model, _ = load_model(cfg, kept_dir)
        if kept in models:  # the restore above must give the model the run itself kept
            same = jax.tree.map(lambda a, b: bool(jnp.array_equal(a, b)),
                                jax.tree.leaves(nnx_params(kept_model)),
                                jax.tree.leaves(nnx_params(models[kept])))
            if not all(same):
                raise ValueError(f"{run}: checkpoint {kept} does not restore the kept model")
        models[kept] = kept_model
    per_row = {}
    for step, model in sorted(models.items()):
        queries = ev.TextQueries(model, codec, d.observation, d.num_particles)
        beliefs, _ = ev.model_beliefs(queries, view, rows, num_particles=d.num_particles,
                                      max_new_tokens=cfg.trainer.max_new_tokens,
                                      temperature=cfg.mindzero.eval.temperature,
                                      seed=cfg.trainer.seed)
        _, rows_scores = ev.score_methods({"m": beliefs}, view, rows, exact,
                                          cfg.mindzero.eval.score_mix)
        per_row[step] = rows_scores["m"]["log_score"]
    episodes = np.array([e for e, _ in rows])
    out = {}
    for step, scores in per_row.items():
        mean, se = metrics.cluster_mean_sem(scores, episodes)
        diff, dse = metrics.paired_difference(per_row[kept], scores, episodes)
        out[step] = {"log_score": mean, "se": se, "kept_minus": diff, "kept_minus_se": dse}
    best = max(out, key=lambda s: out[s]["log_score"])
    return {"kept": kept, "best": best, "candidates": out,
            "within_1se": out[best]["kept_minus"] >= -out[best]["kept_minus_se"]}


def load_config_from_run(run: Path, load_config):
    """The run's own config: the default file with the overrides its config.json differs by
    (seed, workdir, checkpointing; anything else is refused as not the default's run)."""
    saved = json.loads((run / "config.json").read_text())
    t = saved["trainer"]
    cfg = load_config("configs/mindzero_gridworld_tiny.py", [
        f"trainer.seed={t['seed']}", f"trainer.workdir={run}",
        f"trainer.checkpoint_every={t['checkpoint_every']}",
        f"trainer.keep_checkpoints={t['keep_checkpoints']}"])
    import dataclasses
    if not _same(json.loads(json.dumps(dataclasses.asdict(cfg), default=list)), saved):
        raise ValueError(f"{run} was not made by the default config with a seed and "
                         "checkpoint settings: its config.json differs")
    return cfg


def _same(current, saved) -> bool:
    """Every field of the current config equals the run's (fields the run's code did not
    have yet are absent from its file and not compared)."""
    if isinstance(current, dict):
        return all(k not in saved or _same(v, saved[k]) for k, v in current.items())
    return current == saved


def seed_row(run: Path) -> dict:
    r = json.loads((run / "results.json").read_text())
    g, a = r["goal_inference"], r.get("assistance", {})
    mz, warm = g["MindZero"], g["untrained (warm-up only)"]
    listed = g["listed order (heuristic)"]
    row = {"seed": json.loads((run / "config.json").read_text())["trainer"]["seed"],
           "queries": r["queries"]}
    for k in ("top1", "log_score", "kl_exact"):
        row[k], row[k + "_warmup"], row[k + "_listed"] = mz[k], warm[k], listed[k]
        row[k + "_margin"], row[k + "_margin_se"] = warm[k + "_margin"], warm[k + "_margin_se"]
    row["top1_exact"] = g["exact posterior"]["top1"]
    if a:
        row["helper"] = a["MindZero"]["speedup"]
        row["helper_warmup"] = a["untrained (warm-up only)"]["speedup"]
        row["helper_exact"] = a["exact posterior (BIP)"]["speedup"]
        row["helper_margin"] = a["MindZero"]["margin_vs_warmup"]
        row["helper_margin_se"] = a["MindZero"]["margin_vs_warmup_se"]
        row["helper_diffs"] = list(np.subtract(a["MindZero"]["per_episode"],
                                               a["untrained (warm-up only)"]["per_episode"]))
    return row


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--no-candidates", action="store_true",
                        help="skip scoring every saved checkpoint")
    parser.add_argument("--save", action="store_true",
                        help="also write the JSON line to benchmarks/results/")
    args = parser.parse_args(argv)
    record = Run("mindzero_tiny")
    rows = []
    for run in args.runs:
        row = seed_row(run)
        if not args.no_candidates:
            row["selection"] = score_candidates(run)
        rows.append(row)
    print("| seed | top-1 trained / warm-up / listed | log score trained / warm-up / listed | "
          "log-score margin (paired) | KL trained / warm-up | KL margin (paired) | "
          "helper trained / warm-up / exact | helper margin | kept step (best held-out) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        sel = r.get("selection")
        best = None if sel is None else sel["candidates"][sel["best"]]
        kept = "" if sel is None else (
            f"{sel['kept']} ({sel['best']}: kept - best {best['kept_minus']:+.3f}"
            f" ± {best['kept_minus_se']:.3f})")
        helper = ("" if "helper" not in r else
                  f"{r['helper']:+.3f} / {r['helper_warmup']:+.3f} / {r['helper_exact']:+.3f}")
        hmargin = ("" if "helper" not in r else
                   f"{r['helper_margin']:+.3f} ± {r['helper_margin_se']:.3f}")
        print(f"| {r['seed']} | {r['top1']:.3f} / {r['top1_warmup']:.3f} / {r['top1_listed']:.3f} "
              f"| {r['log_score']:.3f} / {r['log_score_warmup']:.3f} / {r['log_score_listed']:.3f} "
              f"| {r['log_score_margin']:+.3f} ± {r['log_score_margin_se']:.3f} "
              f"({r['log_score_margin'] / r['log_score_margin_se']:.1f} SE) "
              f"| {r['kl_exact']:.3f} / {r['kl_exact_warmup']:.3f} "
              f"| {r['kl_exact_margin']:+.3f} ± {r['kl_exact_margin_se']:.3f} "
              f"({r['kl_exact_margin'] / r['kl_exact_margin_se']:.1f} SE) | {helper} | {hmargin} "
              f"| {kept} |")
    summary = {k: float(np.mean([r[k] for r in rows])) for k in
               ("top1", "log_score", "kl_exact", "top1_listed", "log_score_listed",
                "log_score_warmup", "kl_exact_warmup")}
    if all("helper" in r for r in rows):
        # pooled over every seed's episodes (each episode's speedup averages its human seeds)
        diffs = np.concatenate([r.pop("helper_diffs") for r in rows])
        summary["helper"] = float(np.mean([r["helper"] for r in rows]))
        summary["helper_warmup"] = float(np.mean([r["helper_warmup"] for r in rows]))
        summary["helper_exact"] = float(np.mean([r["helper_exact"] for r in rows]))
        summary["helper_margin_pooled"] = float(diffs.mean())
        summary["helper_margin_pooled_se"] = float(diffs.std(ddof=1) / math.sqrt(len(diffs)))
        summary["helper_share_of_exact"] = summary["helper"] / summary["helper_exact"]
    print("\nmean over seeds: " + ", ".join(f"{k} {v:+.3f}" for k, v in summary.items()))
    for r in rows:
        if "selection" in r:
            sel = r["selection"]
            print(f"seed {r['seed']} held-out log score by checkpoint: " + ", ".join(
                f"{s}: {c['log_score']:.3f}" for s, c in sorted(sel["candidates"].items()))
                  + f"; kept {sel['kept']}, within 1 SE of the best: {sel['within_1se']}")
    record.emit({"seeds": rows, "summary": summary}, save=args.save)


if __name__ == "__main__":
    sys.exit(main())
