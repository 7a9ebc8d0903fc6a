"""Table 1b for the household: speedup of each helper over the person alone (paper A.2:
T_human / T_collab - 1), 3 runs per episode, runs that fail the step budget excluded from the
average and counted; mean +- SE over episodes (per-episode means first: runs of one episode
share its layout and task); TFLOPs per episode where a model proposes the particles.

`speedups` turns step counts into per-episode speedups; `speedup_row` / `markdown` make the
table `jaxtom eval` prints; `paired_margin` is the SE-based comparison two helpers' rows rest
on (per-episode difference of mean speedups). `evaluate_helpers(tasks, sources)` runs the
person alone and with each helper (`assist.run_assisted`), run r of episode e with seed
(seed, e, r) for every method, and returns the rows; `default_sources()` are the model-free
rows (oracle, exact posterior, SMC, random goal); a trained policy joins as
`assist.ModelBelief(propose, name, tflops)`.
"""

from __future__ import annotations

import math
import time

import numpy as np

from jaxtom.eval import metrics


def speedups(t_human, t_collab, budget: int) -> tuple[np.ndarray, int, int]:
    """(per-episode mean speedup [E] (NaN where no run finished), failed collaborative runs,
    failed human-alone runs) from step counts [E, R] of paired runs (run r of the person alone
    and with the helper share a seed). A run fails when it reaches `budget` steps unfinished;
    a pair with either run failed is excluded."""
    t_human, t_collab = np.asarray(t_human, float), np.asarray(t_collab, float)
    if t_human.shape != t_collab.shape or t_human.ndim != 2:
        raise ValueError(f"need matching [E, R] step counts, got {t_human.shape} and "
                         f"{t_collab.shape}")
    ok_h, ok_c = t_human < budget, t_collab < budget
    ok = ok_h & ok_c
    ratio = np.where(ok, t_human / np.maximum(t_collab, 1.0) - 1.0, np.nan)
    with np.errstate(invalid="ignore"):
        per_episode = np.where(ok.any(1), np.nansum(ratio, 1) / np.maximum(ok.sum(1), 1), np.nan)
    return per_episode, int((~ok_c).sum()), int((~ok_h).sum())


def speedup_row(name: str, t_human, t_collab, budget: int, tflops: float | None = None) -> dict:
    """One Table 1b row: speedup (%) mean +- SE over episodes with a finished pair."""
    per_episode, failed, failed_alone = speedups(t_human, t_collab, budget)
    keep = per_episode[np.isfinite(per_episode)]
    mean, se = metrics.mean_sem(keep) if keep.size else (math.nan, math.nan)
    return {"method": name, "speedup": 100 * mean, "speedup_se": 100 * se,
            "episodes": int(keep.size), "runs": int(np.size(t_collab)), "failed": failed,
            "failed_alone": failed_alone, "tflops": tflops,
            "per_episode": per_episode.tolist(),
            "mean_steps": float(np.mean(np.asarray(t_collab, float)))}


def paired_margin(row_a: dict, row_b: dict) -> tuple[float, float]:
    """Mean and SE (in %) of per-episode speedup(a) - speedup(b) over episodes both have."""
    a, b = np.asarray(row_a["per_episode"], float), np.asarray(row_b["per_episode"], float)
    m = np.isfinite(a) & np.isfinite(b)
    if not m.any():
        return math.nan, math.nan
    mean, se = metrics.mean_sem(a[m] - b[m])
    return 100 * mean, 100 * se


def markdown(rows: list[dict], title: str = "") -> str:
    """Table 1b's columns (method, speedup, TFLOPs) plus the counts behind them."""
    lines = [title or ("Household proactive assistance (Table 1b protocol): speedup = "
                       "T_human / T_collab - 1, 3 runs per episode, failed runs excluded; "
                       "mean ± SE over episodes."), "",
             "| method | speedup (%) | TFLOPs | episodes | runs | failed (helped / alone) | "
             "mean steps |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        tf = "N/A" if r.get("tflops") is None else f"{r['tflops']:.1f}"
        lines.append(f"| {r['method']} | {r['speedup']:.1f} ± {r['speedup_se']:.1f} | {tf} | "
                     f"{r['episodes']} | {r['runs']} | {r['failed']} / {r['failed_alone']} | "
                     f"{r['mean_steps']:.1f} |")
    return "\n".join(lines)


def run_seed(seed: int, episode: int, run: int) -> int:
    return int(np.random.default_rng([seed, episode, run]).integers(2**31))


def default_sources() -> list:
    from jaxtom.mindzero.household.assist import SMC, ExactPosterior, Oracle, RandomGoal
    return [Oracle(), ExactPosterior(), SMC(), RandomGoal()]


def evaluate_helpers(tasks, sources=None, *, runs: int = 3, seed: int = 0, cfg=None,
                     progress: bool = False) -> list[dict]:
    """Table 1b rows for `sources` (default `default_sources()`) on `tasks` (e.g. the test
    apartments' episodes' tasks): each helper's speedup over the person alone, with the same
    run seeds for every method. A source's `tflops` attribute (model-driven helpers: TFLOPs
    per episode) goes in the TFLOPs column."""
    from jaxtom.mindzero.household.assist import AssistConfig, run_assisted
    cfg = cfg or AssistConfig()
    sources = default_sources() if sources is None else list(sources)
    seeds = [[run_seed(seed, e, r) for r in range(runs)] for e in range(len(tasks))]
    alone = np.array([[run_assisted(task, None, s, cfg)["steps"] for s in row]
                      for task, row in zip(tasks, seeds)], float)
    rows = []
    for source in sources:
        t0 = time.perf_counter()
        steps = np.array([[run_assisted(task, source, s, cfg)["steps"] for s in row]
                          for task, row in zip(tasks, seeds)], float)
        row = speedup_row(source.name, alone, steps, cfg.max_steps,
                          getattr(source, "tflops", None))
        row["wall_s"] = time.perf_counter() - t0
        rows.append(row)
        if progress:
            print(f"{source.name}: {row['speedup']:.1f} ± {row['speedup_se']:.1f} % "
                  f"({row['wall_s']:.1f} s)", flush=True)
    return rows


def evaluate_run_assistance(cfg, models: dict, test) -> dict:
    """`jaxtom eval`'s Table 1b for a household run (`mindzero.household.evaluate` calls it): the person alone and with the model-free helpers and
    one `assist.PolicyBelief` per model in `models` (name -> (model, codec)) on the held-out
    episodes' tasks (`eval.assist_episodes` of them, 0: all), `len(eval.seeds)` runs each,
    the person as the run's data made it (`household.observability`). {} when
    `eval.assistance` is off."""
    from jaxtom.mindzero.household import data as hd
    from jaxtom.mindzero.household.assist import AssistConfig, PolicyBelief
    e_cfg, d = cfg.mindzero.eval, cfg.mindzero.data
    if not e_cfg.assistance:
        return {}
    episodes = list(test)[:e_cfg.assist_episodes or None]
    human = hd.human_params(cfg)
    run_cfg = AssistConfig(max_steps=d.max_steps, human=human)
    sources = default_sources() + [
        PolicyBelief(model, codec, name=name, observation=d.observation,
                     num_particles=d.num_particles, max_new_tokens=cfg.trainer.max_new_tokens,
                     temperature=e_cfg.temperature, seed=cfg.trainer.seed)
        for name, (model, codec) in models.items()]
    rows = evaluate_helpers([ep.task for ep in episodes], sources, runs=len(e_cfg.seeds),
                            seed=cfg.trainer.seed, cfg=run_cfg)
    view = "full" if human.full_observation else "partial"
    title = (f"Household proactive assistance (Table 1b protocol) on {len(episodes)} held-out "
             f"episodes x {len(e_cfg.seeds)} runs, the person with {view} observation: speedup "
             "= T_human / T_collab - 1, failed runs excluded; mean ± SE over episodes; TFLOPs "
             "per run for model-driven helpers. The oracle, exact-posterior and SMC helpers "
             "know the data-generating human model and goal space: reference ceilings, not "
             "baselines comparable with Table 1b's base models.")
    return {"assistance": rows, "assistance_markdown": markdown(rows, title)}


__all__ = ["default_sources", "evaluate_helpers", "evaluate_run_assistance", "markdown",
           "paired_margin", "run_seed", "speedup_row", "speedups"]
