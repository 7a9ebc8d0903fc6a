"""The exact symbolic likelihood and posterior over household goals, and a rule-based prior.

The household analogue of `jaxtom.gridworld.inference`: the human's own policy
(`human.action_distribution`, via `human.action_probability`) replayed along a recorded
episode gives
`log P(a_1..a_t | goal) = sum_t log max(P(a_t | s_t, b_t, goal), floor)`. The human's belief
b_t depends on observations only (never on the goal), so the recorded beliefs serve every
hypothesis and the likelihood is exact for the simulated human. The floor (1e-10, as the
MindZero reward) keeps an impossible goal (e.g. a target the apartment lacks when the policy
has no noise) finite.

Public API
- `LIKELIHOOD_FLOOR`, `step_log_likelihoods(episode, goal, params=None, floor, upto=None)`:
  per-step floored log-likelihoods (NumPy [T]).
- `SymbolicLikelihood(episode, params=None, floor)`: caches per-step arrays by goal;
  `.steps(goal)`, `.log_likelihoods(goals, t=None)` ([G], actions 0..t inclusive, all when
  None), `.posterior(goals, t=None, log_prior=None)` (exact, normalised over the finite set).
- `log_likelihoods(episode, goals, t=None)` / `goal_posterior(episode, goals, t=None,
  log_prior=None)`: one-shot functions.
- `PriorWeights`, `log_prior(goal, apartment, weights)`: soft task-object-target consistency
  rules (paper section 4 / appendix C: "an apple in the dishwasher gets a low prior"; MZ
  `prior_v3`: 2-4 object types, counts not discrepant), `log_priors(goals, apartment)`.
- `goal_neighbours(goal, apartment)`: every goal one edit away (another target of the task or
  any target, one type swapped/added/removed, one count +-1): a finite wrong-goal set for
  tests and baselines.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from jaxtom.household import catalog
from jaxtom.household.apartments import Apartment
from jaxtom.household.goals import Goal
from jaxtom.household.human import HumanParams, action_probability

LIKELIHOOD_FLOOR = 1e-10


def step_log_likelihoods(episode, goal: Goal, params: HumanParams | None = None,
                         floor: float = LIKELIHOOD_FLOOR, upto: int | None = None) -> np.ndarray:
    """float64 [T] log max(P(a_t | s_t, b_t, goal), floor) for t < upto (default all)."""
    params = params or episode.params
    steps = episode.length if upto is None else min(upto, episode.length)
    out = np.empty(steps)
    for t in range(steps):
        p = action_probability(episode.states[t], episode.beliefs[t], goal, episode.actions[t],
                               params)
        out[t] = math.log(max(p, floor))
    return out


class SymbolicLikelihood:
    """Per-goal cache of one episode's per-step log-likelihoods (goals are hashable values)."""

    def __init__(self, episode, params: HumanParams | None = None,
                 floor: float = LIKELIHOOD_FLOOR):
        self.episode = episode
        self.params = params or episode.params
        self.floor = floor
        self._cache: dict[Goal, np.ndarray] = {}

    def steps(self, goal: Goal) -> np.ndarray:
        if goal not in self._cache:
            self._cache[goal] = step_log_likelihoods(self.episode, goal, self.params, self.floor)
        return self._cache[goal]

    def log_likelihoods(self, goals, t: int | None = None) -> np.ndarray:
        """[G] log P(a_0..a_t | goal) (all actions when t is None; t = -1 gives zeros)."""
        end = self.episode.length if t is None else t + 1
        if not -1 <= (end - 1) < self.episode.length:
            raise ValueError(f"t must be in -1..{self.episode.length - 1}, got {t}")
        return np.array([self.steps(g)[:end].sum() for g in goals])

    def posterior(self, goals, t: int | None = None, log_prior=None) -> np.ndarray:
        """[G] exact posterior over the finite goal set (uniform prior unless given)."""
        scores = self.log_likelihoods(goals, t)
        if log_prior is not None:
            scores = scores + np.asarray(log_prior, dtype=np.float64)
        scores = scores - scores.max()
        weights = np.exp(scores)
        return weights / weights.sum()


def log_likelihoods(episode, goals, t: int | None = None,
                    params: HumanParams | None = None) -> np.ndarray:
    return SymbolicLikelihood(episode, params).log_likelihoods(goals, t)


def goal_posterior(episode, goals, t: int | None = None, log_prior=None,
                   params: HumanParams | None = None) -> np.ndarray:
    return SymbolicLikelihood(episode, params).posterior(goals, t, log_prior)


@dataclasses.dataclass(frozen=True)
class PriorWeights:
    """Log-prior penalties (nats) of the rule-based goal prior; 0 disables a rule."""

    wrong_object: float = 5.0  # per object type the task does not use
    wrong_target: float = 5.0  # target the task does not use
    missing_target: float = 23.0  # target the apartment lacks (~ log 1e-10: "very low")
    single_type: float = 1.0  # one object type (occurs in put_* data, so mild)
    per_extra_type: float = 3.0  # per type beyond 4
    unequal_counts: float = 2.0  # per unit of (max - min) count in setup_table/prepare_food
    per_extra_object: float = 1.0  # per object beyond 7 in total


def log_prior(goal: Goal, apartment: Apartment | None = None,
              weights: PriorWeights = PriorWeights()) -> float:
    """Unnormalised log prior of a goal: 0 for a plausible one, minus the penalties above."""
    score = 0.0
    allowed = catalog.TASK_OBJECTS[goal.task_name]
    score -= weights.wrong_object * sum(1 for k, _ in goal.objects if k not in allowed)
    if goal.target not in catalog.TASK_TARGETS[goal.task_name]:
        score -= weights.wrong_target
    if apartment is not None and not apartment.has(goal.target):
        score -= weights.missing_target
    types = len(goal.objects)
    if types == 1:
        score -= weights.single_type
    score -= weights.per_extra_type * max(0, types - 4)
    if goal.task_name in ("setup_table", "prepare_food"):
        counts = [c for _, c in goal.objects]
        score -= weights.unequal_counts * (max(counts) - min(counts))
    score -= weights.per_extra_object * max(0, goal.total - 7)
    return score


def log_priors(goals, apartment: Apartment | None = None,
               weights: PriorWeights = PriorWeights()) -> np.ndarray:
    return np.array([log_prior(g, apartment, weights) for g in goals])


def goal_neighbours(goal: Goal, apartment: Apartment | None = None) -> list[Goal]:
    """Distinct goals one edit from `goal` (never `goal` itself), in a fixed order."""
    out: list[Goal] = []
    counts = dict(goal.objects)

    def add(task, objects, target):
        if not objects:
            return
        g = Goal.make(task, objects, target)
        if g != goal and g not in out:
            out.append(g)

    for target in catalog.TARGETS:
        if apartment is None or apartment.has(target):
            task = goal.task_name if target in catalog.TASK_TARGETS[goal.task_name] else next(
                t for t in catalog.MINDZERO_TASKS + ("watch_tv",) if target in
                catalog.TASK_TARGETS[t])
            add(task, counts, target)
    for kind in counts:
        for other in catalog.GOAL_OBJECT_TYPES:
            if other not in counts:
                swapped = {(other if k == kind else k): c for k, c in counts.items()}
                add(goal.task_name, swapped, goal.target)
        add(goal.task_name, {k: c for k, c in counts.items() if k != kind}, goal.target)
        add(goal.task_name, {**counts, kind: counts[kind] + 1}, goal.target)
        if counts[kind] > 1:
            add(goal.task_name, {**counts, kind: counts[kind] - 1}, goal.target)
    for other in catalog.GOAL_OBJECT_TYPES:
        if other not in counts:
            add(goal.task_name, {**counts, other: 1}, goal.target)
    return out
