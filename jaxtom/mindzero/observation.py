"""Pluggable observations: what the model reads at timestep t of an episode.

An observation is a function `(view, episode, t, num_particles) -> str` over `HostEpisodes`
(host copies of an `EpisodeSet`, so building a batch of prompts costs no device round trips):
  * `figure`: the paper's assistance prompt (Figure 7 with the Figure 11 transcript) -- what
    real LLMs read;
  * `compact`: a short line for small models trained from scratch on a CPU: per object, in
    label order, its label and its path distance from the human at the start, `lag` steps ago
    and now (`held` for the carried object); `compact_closing` adds each object's closing
    count in the current phase (steps towards minus steps away, what `approach_order` sorts
    by), so whether the human's path separates two partners is one token per slot;
    `compact_ranked` also marks, while the lead is carried, partners ranked strictly apart
    on that evidence (`partner_ranks`). These are functions of the observed states only (no
    goal, no planner), i.e. the transcript's positions pre-digested into distances, so
    sequences stay ~45 tokens instead of ~1,500.
  * `image`, `image_short` (`mindzero.data.observation="image"`): Figure 7's assistance prompt
    with the rendered grid as its picture for a vision-language policy, the prompt's
    `<image>` slot written as Qwen3-VL's image item; `observation_image` draws the state
    before action t with the human's path so far as dots (50 px per cell: 256 LLM tokens).
`t` counts observed human actions (1 <= t < episode length).
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import jax
import numpy as np

from jaxtom.gridworld import render_rgb
from jaxtom.gridworld.episodes import EpisodeSet
from jaxtom.gridworld.simulation import state_at
from jaxtom.gridworld.text import IMAGE_TOKEN, assistance_prompt, object_label
from jaxtom.mindzero.config import IMAGE_STYLES, is_image
from jaxtom.models.vl_prompts import IMAGE_PLACEHOLDER


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
    # (states, trajectories) as NumPy trees, copied off the device on the first `state`
    # call: indexing the device arrays leaf by leaf for every prompt and picture costs an
    # eager dispatch per leaf
    host_trees: tuple | None = dataclasses.field(default=None, repr=False, compare=False)

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

    def state(self, e: int, t: int):
        """Episode e's EnvState before action index t (what a picture of it shows), with
        NumPy leaves."""
        self.check_step(e, t)
        if self.host_trees is None:
            self.host_trees = jax.tree.map(np.asarray, (self.episodes.states,
                                                        self.episodes.trajectories))
        states, trajectories = self.host_trees
        one = lambda tree: jax.tree.map(lambda x: x[e], tree)  # noqa: E731
        return state_at(one(states), one(trajectories), t)


def phase_start(view, e: int, t: int) -> int:
    """First action index of the current phase (since the human last picked up or put down)."""
    held = int(view.holding[e, t])
    s = t
    while s > 0 and int(view.holding[e, s - 1]) == held:
        s -= 1
    return s


def closing_counts(view, e: int, t: int) -> np.ndarray:
    """[K] steps towards minus steps away from each object since the current phase began."""
    d = np.stack([view.distances(e, s) for s in range(phase_start(view, e, t), t + 1)])
    return np.sign(d[:-1] - d[1:]).sum(0) if len(d) > 1 else np.zeros(d.shape[1], int)


def approach_order(view, e: int, t: int) -> list[int]:
    """Object ids as the compact observation lists them. First the lead object: the carried
    one, else the one the human has closed in on most consistently during the current phase
    (steps towards minus steps away; then nearest now, then label). Then the rest: first those
    the nearest-first rule allows as the lead's partner (farther than the lead from the human's
    start, as the prompt's rule says a goal's object1 is the nearer), each group in label
    order, except that while the lead is carried a larger closing count comes first.

    Partners move only on evidence. Before the pick the path says nothing about the partner
    (the human walks to the lead whatever comes next, so the exact posterior over partners
    stays at the prior), and ordering them by closing count or distance reshuffled the list
    at every step on noise; a model answering in listed order then changed its most likely
    goal from step to step, and the helper, which commits once the same goal has led three
    refreshes (`gridworld.helper`), committed late or on a reshuffle. While carrying, the
    closing count is the evidence about the partner; distance now is not. The order is a
    function of observed states only; it puts the geometric evidence up front so a small
    model can read it, and SSRL has to learn how far to trust it (how much mass the listed
    alternatives deserve)."""
    now = view.distances(e, t)
    closing = closing_counts(view, e, t)
    labels = view.labels[e]
    lead = int(view.holding[e, t])
    carried = lead >= 0
    if not carried:
        lead = min(range(len(now)), key=lambda k: (-int(closing[k]), int(now[k]), labels[k]))
    start = view.dist[e, view.start_cell[e], view.obj_cell[e, 0]]
    partner = lambda k: (int(start[k]), k) > (int(start[lead]), lead)  # noqa: E731
    evidence = lambda k: -int(closing[k]) if carried else 0  # noqa: E731
    return sorted(range(len(now)), key=lambda k: (k != lead, not partner(k), evidence(k),
                                                 labels[k]))


def partner_ranks(view, e: int, t: int, order: list[int]) -> list[str]:
    """The separator before each slot of `order` after the first: `>` where, while the lead is
    carried, the previous slot's partner is ranked strictly ahead of this one on evidence (the
    nearest-first rule allows it and this one not, or it has the larger closing count), `|`
    otherwise (a tie on evidence, ordered by label only, or no object carried).
    In the carry phase the human's path is the only evidence about the partner, and whether it
    has separated the first listed partner from the second is then this one token (where it
    has, the exact posterior puts nearly all its mass on the first listed pair)."""
    if int(view.holding[e, t]) < 0:
        return ["|"] * (len(order) - 1)
    closing = closing_counts(view, e, t)
    start = view.dist[e, view.start_cell[e], view.obj_cell[e, 0]]
    lead = order[0]
    key = lambda k: (bool((int(start[k]), k) > (int(start[lead]), lead)),  # noqa: E731
                     int(closing[k]))
    partners = order[1:]
    return ["|"] + [">" if key(a) > key(b) else "|" for a, b in zip(partners, partners[1:])]


def compact_observation(view: HostEpisodes, e: int, t: int, num_particles: int,
                        lag: int = 4, closing: bool = False, ranked: bool = False) -> str:
    """`n=2 | 7 3 held brown square | 9 8 6 blue square | ...`: every object as its path
    distance from the human at the start, `lag` actions ago and now (`held` for the carried
    object), then its label, listed in `approach_order`. Every slot has the same token length;
    numbers come before the label, so under causal attention a label token can gather its own
    object's numbers. `ranked`: the separators are `partner_ranks`'."""
    view.check_step(e, t)
    start = view.dist[e, view.start_cell[e], view.obj_cell[e, 0]].astype(int)
    before = view.distances(e, max(t - lag, 0))
    now = view.distances(e, t)
    held = int(view.holding[e, t])
    cap = lambda d: str(min(int(d), MAX_DISTANCE))  # noqa: E731
    count = closing_counts(view, e, t) if closing else None
    signed = lambda k: f" {max(-MAX_CLOSING, min(MAX_CLOSING, int(count[k]))):+d}"  # noqa: E731
    order = approach_order(view, e, t)
    parts = [f"{cap(start[k])} {cap(before[k])} {'held' if k == held else cap(now[k])}"
             f"{signed(k) if closing else ''} {view.labels[e][k]}" for k in order]
    seps = partner_ranks(view, e, t, order) if ranked else ["|"] * (len(order) - 1)
    return f"n={num_particles} | " + parts[0] + "".join(
        f" {sep} {part}" for sep, part in zip(seps, parts[1:]))


MAX_DISTANCE = 63  # distances in compact observations are capped here (one token each)
MAX_CLOSING = 9  # closing counts (compact_closing) are capped at +-9
COMPACT_WORDS = tuple(f" {d}" for d in range(MAX_DISTANCE + 1)) + (" held",)


def figure_observation(view: HostEpisodes, e: int, t: int, num_particles: int,
                       modality: str = "text") -> str:
    view.check_step(e, t)
    one = lambda tree: jax.tree.map(lambda x: x[e], tree)  # noqa: E731
    initial, traj = one(view.episodes.states), one(view.episodes.trajectories)
    return assistance_prompt(state_at(initial, traj, t), traj, num_particles, modality=modality)


def compact_closing_observation(view: HostEpisodes, e: int, t: int, num_particles: int) -> str:
    """`compact` plus each object's signed closing count in the current phase."""
    return compact_observation(view, e, t, num_particles, closing=True)


def compact_ranked_observation(view: HostEpisodes, e: int, t: int, num_particles: int) -> str:
    """`compact_closing` with `partner_ranks`' separators (`>`: ranked ahead on evidence)."""
    return compact_observation(view, e, t, num_particles, closing=True, ranked=True)


OBSERVATIONS: dict[str, Callable[..., str]] = {"compact": compact_observation,
                                               "compact_closing": compact_closing_observation,
                                               "compact_ranked": compact_ranked_observation,
                                               "figure": figure_observation}


def image_observation(view: HostEpisodes, e: int, t: int, num_particles: int) -> str:
    """The prompt text, with one image placeholder where the picture goes. `view`: anything
    with `state(e, t)` (held-out episodes, or the live rows of online assistance)."""
    text = assistance_prompt(view.state(e, t), None, num_particles, modality="image")
    if text.count(IMAGE_TOKEN) != 1:
        raise ValueError(f"the image prompt must have one {IMAGE_TOKEN} slot, found "
                         f"{text.count(IMAGE_TOKEN)}")
    return text.replace(IMAGE_TOKEN, IMAGE_PLACEHOLDER)


def short_image_observation(view: HostEpisodes, e: int, t: int, num_particles: int) -> str:
    """The picture and one line asking for `num_particles` goals (`observation=
    "image_short"`): for a model trained from scratch, as the text default reads a compact
    line instead of Figure 7. Figure 7's text is the same in every prompt of a run with the
    Figure 7 label set (139 of a row's ~275 tokens on the CPU image default), so it costs
    compute and tells such a model nothing; the answer format comes from the warm-up."""
    view.check_step(e, t)
    return f"{IMAGE_PLACEHOLDER}\nthe human's {int(num_particles)} most likely goals :"


IMAGE_OBSERVATIONS = {"image": image_observation, "image_short": short_image_observation}


def ranked_partner(view: HostEpisodes, e: int, t: int) -> int:
    """The object the human's path has ranked ahead as the carried lead's partner (the
    `compact_ranked` observation's `>` after its first listed partner), or -1 where the path
    has not separated the partners (or nothing is carried). Observed states only."""
    order = approach_order(view, e, t)
    return order[1] if partner_ranks(view, e, t, order)[1:2] == [">"] else -1


def observation_image(view: HostEpisodes, e: int, t: int, cell_size: int = 50,
                      style: str = "figure") -> np.ndarray:
    """uint8 [H, W, 3]: the grid before action index t, `cell_size` px per cell, with every
    cell the human stood on before actions 0..t marked (its trajectory so far), drawn in
    `style`: the paper's "figure" or flat "cells" (`gridworld.render_rgb`), or
    "cells_ranked", the cells with `ranked_partner`'s object outlined. That outline is the
    picture's `compact_ranked`: a from-scratch tower does not learn to read the partner from
    the direction of the path within the CPU budget, and the text default reads this
    evidence as one token too. The trace is the episode's whole
    row of cells under a mask, so every step renders with one program."""
    if style not in IMAGE_STYLES:
        raise ValueError(f"image style must be one of {IMAGE_STYLES}, got {style!r}")
    state = view.state(e, t)
    width = int(np.shape(state.layout.walls)[1])
    cells = np.asarray(view.human_cell[e])
    trace = (np.stack([cells % width, cells // width], axis=1), np.arange(len(cells)) <= t)
    marks = None
    if style == "cells_ranked":
        partner = ranked_partner(view, e, t)
        marks = (np.asarray(state.obj_pos)[max(partner, 0)][None], np.array([partner >= 0]))
    return np.asarray(render_rgb(state, cell_size=cell_size, trace=trace,
                                 style="figure" if style == "figure" else "cells",
                                 marks=marks))


def get_observation(name: str) -> Callable[..., str]:
    if is_image(name):
        return IMAGE_OBSERVATIONS[name]
    if name not in OBSERVATIONS:
        raise ValueError(f"unknown observation {name!r}; expected one of {sorted(OBSERVATIONS)}")
    return OBSERVATIONS[name]
