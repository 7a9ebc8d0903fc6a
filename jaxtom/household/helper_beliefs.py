"""Goal beliefs for the household helper (MindZero section 5.4, appendix C.1; notes sections 3
and 4), independent of the simulator: a belief is a list of (Goal, p) particles.

- `GnP`: the public code's grab-and-put rules on a belief (P(type) = sum of p over particles
  still needing it after removing what is delivered or held; grab threshold 0.7, put threshold
  0.5).
- `SMCBelief`: Sequential Monte Carlo over goals as AutoToM / O-WAH run it: refill to N
  particles from a proposal, reweight by the one-step likelihood, all-zero -> 0.01 each,
  normalise, keep the top 5 plus any with p >= 0.10 (no renormalisation, no resampling).
- `random_goal`: O-WAH's `get_random_goal` (1-3 predicates, counts 1-6, one target).
"""

from __future__ import annotations

import dataclasses
import math
from collections import Counter
from typing import Callable, Iterable, Sequence

import numpy as np

from jaxtom.household.catalog import GOAL_OBJECT_TYPES, TARGETS, TASK_TARGETS, TASKS
from jaxtom.household.goals import Goal

Particles = list  # list[tuple[Goal, float]]


def normalise(particles: Iterable) -> Particles:
    """Merged duplicates, p clipped at 0, summing to 1 (empty if no mass)."""
    mass: dict = {}
    for goal, p in particles:
        mass[goal] = mass.get(goal, 0.0) + max(float(p), 0.0)
    total = sum(mass.values())
    if total <= 0 or not math.isfinite(total):
        return []
    return [(g, p / total) for g, p in mass.items()]


def remaining(goal: Goal, delivered: Counter, held: Counter) -> dict[str, int]:
    """Objects of `goal` still to fetch: its counts minus those already at its target
    (`delivered[(type, target)]`) and those in either agent's hands (`held[type]`)."""
    out = {}
    for kind, count in goal.objects:
        left = count - delivered.get((kind, goal.target), 0) - held.get(kind, 0)
        if left > 0:
            out[kind] = left
    return out


def type_probs(particles: Particles, delivered: Counter, held: Counter) -> dict[str, float]:
    """P(type still needed) = sum of p over particles that still list it."""
    probs: dict[str, float] = {}
    for goal, p in particles:
        for kind in remaining(goal, delivered, held):
            probs[kind] = probs.get(kind, 0.0) + p
    return probs


def target_probs(particles: Particles, kind: str | None = None) -> dict[str, float]:
    """P(target) = sum of p per target (over particles naming `kind`, when given, normalised
    by nothing: the helper compares the raw sum to its threshold)."""
    probs: dict[str, float] = {}
    for goal, p in particles:
        if kind is None or goal.count(kind) > 0:
            probs[goal.target] = probs.get(goal.target, 0.0) + p
    return probs


@dataclasses.dataclass(frozen=True)
class GnPConfig:
    grab_threshold: float = 0.7
    put_threshold: float = 0.5
    start_at_put: bool = True  # no inference before the human's first put


@dataclasses.dataclass(frozen=True)
class Commitment:
    """What the helper is doing until its hand state changes: ('grab', type) or ('put',
    target); `None` kind = idle."""
    kind: str | None = None
    what: str | None = None


def gnp_decide(particles: Particles, holding: str | None, delivered: Counter, held: Counter,
               cfg: GnPConfig = GnPConfig()) -> Commitment:
    """The grab-and-put rule on a belief. Empty-handed: grab the most likely still-needed type
    if its P >= grab threshold. Holding `holding`: put it at the most likely target (among
    particles listing that type; all particles if none do) if P >= put threshold. Else idle."""
    if holding is None:
        probs = type_probs(particles, delivered, held)
        if probs:
            kind, p = max(sorted(probs.items()), key=lambda kv: kv[1])
            if p >= cfg.grab_threshold:
                return Commitment("grab", kind)
        return Commitment()
    probs = target_probs(particles, holding) or target_probs(particles)
    if probs:
        target, p = max(sorted(probs.items()), key=lambda kv: kv[1])
        if p >= cfg.put_threshold:
            return Commitment("put", target)
    return Commitment()


# --- random goal ------------------------------------------------------------------------------
def random_goal(rng: np.random.Generator) -> Goal:
    """O-WAH's `get_random_goal`: 1-3 distinct object types with counts 1-6 and one target
    (the task name is one whose targets include it; it does not affect the helper)."""
    n = int(rng.integers(1, 4))
    kinds = rng.choice(len(GOAL_OBJECT_TYPES), size=n, replace=False)
    target = TARGETS[int(rng.integers(0, len(TARGETS)))]
    task = next(t for t in TASKS if target in TASK_TARGETS[t])
    return Goal.make(task, [(GOAL_OBJECT_TYPES[k], int(rng.integers(1, 7))) for k in kinds],
                     target)


# --- SMC over goals ---------------------------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class SMCConfig:
    num_particles: int = 20
    keep_top: int = 5
    keep_min: float = 0.10
    all_zero: float = 0.01


class SMCBelief:
    """A persistent particle set {goal: weight}. `update(proposals, step_likelihood)`: refill
    with unseen proposals up to N, weight *= likelihood of the latest action, normalise, prune.
    The public code's weights after pruning do not sum to 1; `particles()` normalises them for
    the helper."""

    def __init__(self, cfg: SMCConfig = SMCConfig()):
        self.cfg = cfg
        self.weights: dict[Goal, float] = {}

    def update(self, proposals: Sequence[Goal], step_likelihood: Callable[[Goal], float]):
        c = self.cfg
        if len(self.weights) < c.num_particles:
            fill = 1.0 / c.num_particles
            for goal in proposals:
                if len(self.weights) >= c.num_particles:
                    break
                self.weights.setdefault(goal, fill)
        new = {g: w * float(step_likelihood(g)) for g, w in self.weights.items()}
        if not any(v > 0 for v in new.values()):
            new = {g: c.all_zero for g in new}
        total = sum(new.values())
        ranked = sorted(new.items(), key=lambda kv: -kv[1])
        self.weights = {g: w / total for i, (g, w) in enumerate(ranked)
                        if i < c.keep_top or w / total >= c.keep_min}
        return self

    def particles(self) -> Particles:
        return normalise(self.weights.items())


__all__ = ["Commitment", "GnPConfig", "Particles", "SMCBelief", "SMCConfig", "gnp_decide",
           "normalise", "random_goal", "remaining", "target_probs", "type_probs"]
