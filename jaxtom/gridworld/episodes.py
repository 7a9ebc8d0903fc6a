"""Unlabelled episodes for training and evaluation data (MindZero appendix B.2).

Candidates are simulated in large jitted batches with the helper staying put and no human
randomness, then filtered for goal ambiguity: the goal objects lie more than `min_gap` path
steps apart and from the human's start, the first pick happens at least `min_pick_step`
steps in, and carrying takes at least `min_carry_steps`. The test split draws its labels from
held-out shapes (any colour), the training split never uses held-out colours or shapes, and a
test episode never reuses a training wall layout.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from jaxtom.gridworld.inference import Trajectory
from jaxtom.gridworld.planner import cell_of
from jaxtom.gridworld.simulation import reset_batch, rollout_batch
from jaxtom.gridworld.types import (
    COLORS, HELD_OUT_COLORS, HELD_OUT_SHAPES, PICK, PUT, SHAPES, EnvParams, EnvState,
)


@dataclasses.dataclass(frozen=True)
class EpisodeFilter:
    min_gap: int = 6  # goal objects > min_gap apart, and > min_gap from the human's start
    min_pick_step: int = 6
    min_carry_steps: int = 6


@dataclasses.dataclass
class EpisodeSet:
    """A batch of recorded episodes: initial states, the human's trajectories, and the steps
    at which the human picked and put (numbered from 1)."""

    states: EnvState  # batched initial states
    trajectories: Trajectory  # batched, time-major within each episode
    pick_step: np.ndarray
    put_step: np.ndarray
    length: np.ndarray

    def __len__(self) -> int:
        return int(self.length.shape[0])

    def take(self, index) -> "EpisodeSet":
        index = np.asarray(index, dtype=np.int64)  # an empty list would be float64
        pick = lambda tree: jax.tree.map(lambda x: x[index], tree)  # noqa: E731
        return EpisodeSet(pick(self.states), pick(self.trajectories), self.pick_step[index],
                          self.put_step[index], self.length[index])


def split_params(params: EnvParams, split: str) -> EnvParams:
    """Label constraints of a split: `train` avoids held-out colours and shapes; `test` uses the
    held-out shapes with any colour."""
    held_colors = {COLORS.index(c) for c in HELD_OUT_COLORS}
    held_shapes = {SHAPES.index(s) for s in HELD_OUT_SHAPES}
    if split == "train":
        return params.replace(colors=tuple(c for c in range(len(COLORS)) if c not in held_colors),
                              shapes=tuple(s for s in range(len(SHAPES)) if s not in held_shapes))
    if split == "test":
        return params.replace(colors=tuple(range(len(COLORS))), shapes=tuple(sorted(held_shapes)))
    raise ValueError(f"unknown split {split!r}; expected 'train' or 'test'")


def _event_step(actions, valid, event) -> np.ndarray:
    """1-based step of the first `event` action, or 0 if it never happens."""
    hit = (actions == event) & valid
    return np.where(hit.any(1), hit.argmax(1) + 1, 0)


def _filter_mask(states: EnvState, traj: Trajectory, final: EnvState, params: EnvParams,
                 rules: EpisodeFilter):
    actions, valid = np.asarray(traj.action), np.asarray(traj.valid)
    # the first pick and put are the goal's: the human only ever picks object1
    pick = _event_step(actions, valid, PICK)
    put = _event_step(actions, valid, PUT)
    goal = np.asarray(states.goal)
    dist = states.layout.dist
    rows = np.arange(len(goal))
    obj_cells = np.asarray(cell_of(states.obj_pos, params.width))
    start = np.asarray(cell_of(states.human_start, params.width))
    c1, c2 = obj_cells[rows, goal[:, 0]], obj_cells[rows, goal[:, 1]]
    gap = np.asarray(dist[rows, c1, c2])
    from_start = np.minimum(np.asarray(dist[rows, start, c1]), np.asarray(dist[rows, start, c2]))
    done_in_time = np.asarray(final.done) & (np.asarray(final.time) < params.max_steps)
    keep = (done_in_time & (gap > rules.min_gap) & (from_start > rules.min_gap)
            & (pick >= rules.min_pick_step) & (put - pick >= rules.min_carry_steps) & (put > 0))
    return keep, pick, put, np.asarray(final.time)


def generate_episodes(key: jax.Array, params: EnvParams, num_episodes: int,
                      rules: EpisodeFilter = EpisodeFilter(), batch_size: int = 1024,
                      exclude_layouts: set | None = None, max_batches: int = 200) -> EpisodeSet:
    """`num_episodes` filtered episodes (human alone, no randomness), deterministic in `key`."""
    params = params.replace(random_prob=0.0)
    kept: list[EpisodeSet] = []
    total = 0
    for batch in range(max_batches):
        k_reset, k_roll = jax.random.split(jax.random.fold_in(key, batch))
        states = reset_batch(k_reset, params, batch_size)
        final, traj, _, _ = rollout_batch(jax.random.split(k_roll, batch_size), states, params, "stay")
        keep, pick, put, length = _filter_mask(states, traj, final, params, rules)
        if exclude_layouts:
            walls = np.asarray(states.layout.walls)
            keep &= np.array([w.tobytes() not in exclude_layouts for w in walls])
        index = np.flatnonzero(keep)[: num_episodes - total]
        if len(index):
            chosen = EpisodeSet(states, traj, pick, put, length).take(index)
            kept.append(chosen)
            total += len(index)
        if total >= num_episodes:
            break
    else:
        raise RuntimeError(f"only {total} of {num_episodes} episodes passed the filters after "
                           f"{max_batches} batches of {batch_size}; loosen EpisodeFilter")
    return EpisodeSet(
        states=jax.tree.map(lambda *xs: jnp.concatenate(xs), *[e.states for e in kept]),
        trajectories=jax.tree.map(lambda *xs: jnp.concatenate(xs), *[e.trajectories for e in kept]),
        pick_step=np.concatenate([e.pick_step for e in kept]),
        put_step=np.concatenate([e.put_step for e in kept]),
        length=np.concatenate([e.length for e in kept]))


def layout_keys(episodes: EpisodeSet) -> set:
    return {w.tobytes() for w in np.asarray(episodes.states.layout.walls)}


def train_test_episodes(key: jax.Array, params: EnvParams, num_train: int = 800,
                        num_test: int = 100, rules: EpisodeFilter = EpisodeFilter(),
                        batch_size: int = 1024) -> tuple[EpisodeSet, EpisodeSet]:
    """The default 800/100 split with held-out labels and layouts for the test episodes."""
    k_train, k_test = jax.random.split(key)
    train = generate_episodes(k_train, split_params(params, "train"), num_train, rules, batch_size)
    test = generate_episodes(k_test, split_params(params, "test"), num_test, rules, batch_size,
                             exclude_layouts=layout_keys(train))
    return train, test
