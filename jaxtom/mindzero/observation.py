"""Pluggable observations: what the model reads at timestep t of an episode.

An observation is a function `(view, episode, t, num_particles) -> str` over `HostEpisodes`
(host copies of an `EpisodeSet`, so building a batch of prompts costs no device round trips):
  * `figure`: the paper's assistance prompt (Figure 7 with the Figure 11 transcript) -- what
    real LLMs read;
  * `compact`: a short line for small models trained from scratch on a CPU: per object its
    label and its path distance from the human at the start, `lag` steps ago and now, plus
    what the human holds. These are functions of the observed states only (no goal, no
    planner), i.e. the transcript's positions pre-digested into distances, so sequences stay
    ~60 tokens instead of ~1,500.
`t` counts observed human actions (1 <= t < episode length).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import jax
import numpy as np

from jaxtom.gridworld.episodes import EpisodeSet
from jaxtom.gridworld.text import assistance_prompt, object_label


@dataclasses.dataclass
class HostEpisodes:
    """NumPy copies of the fields prompts and rewards need, one row per episode."""
    episodes: EpisodeSet
    labels: list[list[str]]
    dist: np.ndarray  # [E, C, C]
    obj_cell: np.ndarray  # [E, T, K] object cells before each action
    human_cell: np.ndarray  # [E, T]
    holding: np.ndarray  # [E, T]
    start_cell: np.ndarray  # [E]
    length: np.ndarray  # [E]
    goal: np.ndarray  # [E, 2] (for evaluation only; never shown to the model)

    def __len__(self) -> int:
        return len(self.length)

    @classmethod
    def from_episodes(cls, episodes: EpisodeSet, width: int = 10) -> "HostEpisodes":
        s, tr = episodes.states, episodes.trajectories
        color, shape = np.asarray(s.obj_color), np.asarray(s.obj_shape)
        labels = [[object_label(c, k) for c, k in zip(cs, ks)] for cs, ks in zip(color, shape)]
        cell = lambda p: p[..., 1] * width + p[..., 0]  # noqa: E731
        return cls(episodes=episodes, labels=labels, dist=np.asarray(s.layout.dist),
                   obj_cell=cell(np.asarray(tr.obj_pos)), human_cell=cell(np.asarray(tr.human_pos)),
                   holding=np.asarray(tr.human_holding), start_cell=cell(np.asarray(s.human_start)),
                   length=np.asarray(episodes.length), goal=np.asarray(s.goal))

    def distances(self, e: int, t: int) -> np.ndarray:
        """[K] path distance from the human to each object before action index t."""
        return self.dist[e, self.human_cell[e, t], self.obj_cell[e, t]].astype(int)

    def check_step(self, e: int, t: int) -> None:
        if not 1 <= t < int(self.length[e]):
            raise ValueError(f"timestep {t} outside 1..{int(self.length[e]) - 1} for episode {e}")


def compact_observation(view: HostEpisodes, e: int, t: int, num_particles: int,
                        lag: int = 4) -> str:
    view.check_step(e, t)
    start = view.dist[e, view.start_cell[e], view.obj_cell[e, 0]].astype(int)
    before = view.distances(e, max(t - lag, 0))
    now = view.distances(e, t)
    held = int(view.holding[e, t])
    parts = [f"{view.labels[e][k]} {start[k]} {before[k]} {now[k]}"
             for k in range(len(now)) if k != held]
    hold = view.labels[e][held] if held >= 0 else "none"
    return f"n={num_particles} hold {hold} | " + " | ".join(parts)


def figure_observation(view: HostEpisodes, e: int, t: int, num_particles: int,
                       modality: str = "text") -> str:
    from jaxtom.gridworld.simulation import state_at
    view.check_step(e, t)
    one = lambda tree: jax.tree.map(lambda x: x[e], tree)  # noqa: E731
    initial, traj = one(view.episodes.states), one(view.episodes.trajectories)
    return assistance_prompt(state_at(initial, traj, t), traj, num_particles, modality=modality)


OBSERVATIONS: dict[str, Callable[..., str]] = {"compact": compact_observation,
                                               "figure": figure_observation}


def get_observation(name: str) -> Callable[..., str]:
    if name not in OBSERVATIONS:
        raise ValueError(f"unknown observation {name!r}; expected one of {sorted(OBSERVATIONS)}")
    return OBSERVATIONS[name]
