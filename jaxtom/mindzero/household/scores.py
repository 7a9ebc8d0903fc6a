"""How a belief over household goals scores against an episode's true goal: the log score of
the true goal under `(1 - mix) q + mix / |H|` (mix: particles are sparse, and mass outside the
goal space H is lost), top-1 (ties share the credit) and KL(exact || smoothed q) over H."""

from __future__ import annotations

import numpy as np

from jaxtom.household.goals import Goal
from jaxtom.mindzero.household import data as hd


def _support_index(episode):
    support = hd.goal_support(episode.apartment)
    return support, {g: i for i, g in enumerate(support)}


def dense(particles, episode) -> np.ndarray:
    """[|H|] a parse result's mass on the episode's goal space (0 elsewhere / on failure)."""
    support, index = _support_index(episode)
    out = np.zeros(len(support))
    if particles is not None and getattr(particles, "ok", False):
        for g, q in zip(particles.goals, particles.probs):
            if g in index:
                out[index[g]] += q
    return out


def top1_share(goals, probs, true: Goal) -> float:
    if not goals:
        return 0.0
    probs = np.asarray(probs, float)
    best = np.isclose(probs, probs.max(), rtol=1e-9, atol=0.0)
    hit = [g == true for g in goals]
    return float(sum(b and h for b, h in zip(best, hit)) / best.sum())


def scores_from_mass(mass: np.ndarray, top1: float, episode, mix: float,
                     exact: np.ndarray | None = None) -> dict:
    _, index = _support_index(episode)
    qs = (1.0 - mix) * mass + mix / len(mass)
    out = {"log_score": float(np.log(qs[index[episode.goal]])), "top1": top1}
    if exact is not None:
        live = exact > 0
        out["kl_exact"] = float(np.sum(exact[live] * (np.log(exact[live]) - np.log(qs[live]))))
    return out


def belief_scores(parsed, episodes, mix: float, exact=None) -> dict[str, np.ndarray]:
    """Per-query scores of parse results (one per query; `episodes[i]` its episode)."""
    rows = []
    for i, (p, ep) in enumerate(zip(parsed, episodes)):
        ok = getattr(p, "ok", False)
        goals, probs = (list(p.goals), list(p.probs)) if ok else ([], [])
        rows.append(scores_from_mass(dense(p, ep), top1_share(goals, probs, ep.goal), ep, mix,
                                     None if exact is None else exact[i]))
    return {k: np.array([r[k] for r in rows]) for k in rows[0]}
