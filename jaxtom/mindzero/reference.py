"""Per-sample reference of the ELBO reward over the NumPy gridworld oracle.

Written the way the public MindZero `compute_score` works -- one sample at a time, replaying
the episode's states up to t and asking the planner for each step -- for the tests (oracle of
`elbo_reward_batch`) and the benchmark (the baseline it compares against).
"""

from __future__ import annotations

import math

import numpy as np

from jaxtom.gridworld import reference
from jaxtom.gridworld.types import EnvParams, goal_index


def episode_states(walls, trajectory: dict, goal, num_steps: int) -> list:
    """Reference states before each of the first `num_steps` actions, from host arrays of one
    episode's trajectory (keys as `Trajectory` fields)."""
    states = []
    for t in range(num_steps):
        states.append(reference.RefState(
            walls=walls, obj_pos=[tuple(int(v) for v in p) for p in trajectory["obj_pos"][t]],
            human_pos=tuple(int(v) for v in trajectory["human_pos"][t]),
            helper_pos=tuple(int(v) for v in trajectory["helper_pos"][t]),
            human_holding=int(trajectory["human_holding"][t]),
            helper_holding=int(trajectory["helper_holding"][t]),
            human_last_action=int(trajectory["human_last_action"][t]), helper_stays=0,
            goal=tuple(int(g) for g in goal), time=t))
    return states


def elbo_reward_one(walls, trajectory: dict, goal, num_steps: int, pairs, q, ok: bool,
                    params: EnvParams, *, prior_weight=1.0, entropy_weight=1.0,
                    format_penalty=None, floor=1e-12) -> float:
    """Eq. 4 for one sample, from scratch (planner likelihoods recomputed for this sample)."""
    if not ok:
        return format_penalty if format_penalty is not None else (num_steps + 1) * math.log(floor)
    states = episode_states(walls, trajectory, goal, num_steps)
    actions = [int(a) for a in trajectory["action"][:num_steps]]
    per_step = reference.step_log_likelihoods(states, actions, params) if num_steps else \
        np.zeros((0, params.num_goals))
    total = per_step.sum(0)
    value = 0.0
    for (o1, o2), qi in zip(pairs, q):
        g = int(goal_index(o1, o2, params.num_objects))
        value += qi * (total[g] - prior_weight * math.log(params.num_goals))
        value -= entropy_weight * qi * math.log(max(qi, floor))
    return float(value)
