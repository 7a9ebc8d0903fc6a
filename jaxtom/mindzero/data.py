"""Training data: unlabelled episodes unrolled into timesteps (MindZero appendix B.2).

Every (episode, t) with 1 <= t < length is one prompt; nothing about the goal is attached, so
the pipeline is label-free by construction. The `grain` pipeline shuffles, repeats (epochs)
and batches the records deterministically from a seed; the prompts are rendered lazily in the
`map` step.

Warm-up targets stand in for what the paper samples from a pretrained model when a base model
cannot yet write the format (section 5): label-free particles that follow the prompt's
nearest-first rule. Two teachers: `random` (any valid pair but the true goal) and
`approached` (a weak observation-only heuristic: object1 is the first object the compact
observation lists, object2 one of the next three, uniformly, with random probabilities), which
teaches a from-scratch model to read the observation; SSRL then has to learn from the reward
which of the listed partners deserve the mass. A third, `listed`, keeps the partners in listed
order (hypothesis k pairs the lead with the (k+1)-th listed object): a fixed slot to copy. A
fourth, `lead`, pairs the
lead with any object the nearest-first rule allows as its partner, uniformly: it teaches the
format and where the lead sits, but nothing about which partner, which `approached` does by
drawing from the three the observation lists first; so all of the partner choice, which is
what moves the helper, is left to SSRL, as it is for the paper's base model. A fifth,
`pictured`, is `listed` in an order a picture shows (`pictured_partners`): the partner the
path has ranked ahead first (the one `cells_ranked` outlines), then the rest in label order.
The listed order's nearest-first rule needs path distances from the human's start, which a
from-scratch vision tower does not read, so its answers name the lead or an earlier partner
again.
"""

from __future__ import annotations

import grain
import numpy as np

from jaxtom.mindzero.observation import (HostEpisodes, approach_order, get_observation,
                                         partner_ranks)
from jaxtom.mindzero.config import ORDERS, TEACHERS
from jaxtom.mindzero.particles import format_particles


def timestep_records(view: HostEpisodes, stride: int = 1) -> list[tuple[int, int]]:
    """All (episode, t) pairs, t = 1 .. length-1 (every `stride`-th)."""
    return [(e, t) for e in range(len(view)) for t in range(1, int(view.length[e]), stride)]


def timestep_dataset(view: HostEpisodes, *, batch_size: int, seed: int, observation="compact",
                     num_particles: int = 2, epochs: int | None = None, stride: int = 1):
    """A grain MapDataset of batches `{"episode": [B], "t": [B], "prompt": [B] str}`
    (shuffled per epoch, repeated `epochs` times or forever, remainder dropped)."""
    render = get_observation(observation)
    records = timestep_records(view, stride)
    if len(records) < batch_size:
        raise ValueError(f"{len(records)} timesteps cannot fill a batch of {batch_size}")

    def to_example(record):
        e, t = record
        return {"episode": np.int32(e), "t": np.int32(t),
                "prompt": render(view, e, t, num_particles)}

    ds = grain.MapDataset.source(records).shuffle(seed=seed).repeat(epochs)
    return ds.map(to_example).batch(batch_size, drop_remainder=True)




def _ordered(a: int, b: int, start: np.ndarray) -> bool:
    """(a, b) follows the nearest-first rule: a nearer the human's start (ties: lower id)."""
    return start[a] < start[b] or (start[a] == start[b] and a < b)


def pictured_partners(view: HostEpisodes, e: int, t: int, order: list[int]) -> list[int]:
    """The lead's (`order[0]`) partners as the `pictured` teacher lists them: the partner the
    path has ranked ahead (`partner_ranks` writes `>` after it; the `cells_ranked` picture
    outlines it) first where there is one, then every other object in label order, which
    does not change from step to step or depend on distances the picture does not show."""
    labels = view.labels[e]
    ranked = order[1:2] if partner_ranks(view, e, t, order)[1:2] == [">"] else []
    return ranked + sorted((k for k in order[1:] if k not in ranked), key=lambda k: labels[k])


def warmup_pairs(view: HostEpisodes, e: int, num_particles: int, rng: np.random.Generator,
                 t: int | None = None, teacher: str = "random"):
    """Distinct goal pairs from `teacher` at (e, t). `random` excludes the true goal, so the
    warm-up never teaches it; `approached` and `lead` never read the goal at all (excluding
    the true goal there would itself leak the label, as a learned aversion to the right
    answer) and are topped up with random pairs when their candidates run out."""
    if teacher not in TEACHERS:
        raise ValueError(f"unknown warm-up teacher {teacher!r}; expected one of {TEACHERS}")
    start = view.dist[e, view.start_cell[e], view.obj_cell[e, 0]]
    ordered = [(a, b) for a in range(len(start)) for b in range(len(start))
               if a != b and _ordered(a, b, start)]
    chosen: list[tuple[int, int]] = []
    if teacher == "random":
        true = tuple(int(g) for g in view.goal[e])
        ordered = [p for p in ordered if p != true and p[::-1] != true]
    elif t is not None:
        order = approach_order(view, e, t)
        later = order[1:4]  # the lead's likeliest partners first (see approach_order)
        if teacher == "approached":
            rng.shuffle(later)
        elif teacher == "lead":  # any partner the nearest-first rule allows, uniformly
            later = [b for b in order[1:] if _ordered(order[0], b, start)]
            rng.shuffle(later)
        elif teacher == "pictured":  # the outlined partner, then label order
            later = pictured_partners(view, e, t, order)[:num_particles]
        else:  # listed: hypothesis k pairs the lead with the (k+1)-th listed object
            later = order[1:1 + num_particles]
        chosen = [(order[0], b) for b in later][:num_particles]
    rest = [p for p in ordered if p not in chosen and p[::-1] not in chosen]
    picks = rng.choice(len(rest), num_particles - len(chosen), replace=False)
    return chosen + [rest[i] for i in picks]


def warmup_target(view: HostEpisodes, e: int, num_particles: int, rng: np.random.Generator,
                  t: int | None = None, teacher: str = "random",
                  order: str = "drawn", evidence_order: str = "none") -> str:
    """A well-formed completion with the teacher's particles and random probabilities, in
    the teacher's pair order (nothing about the goal is taught). `order` arranges the
    probabilities of every answer: "drawn" as drawn, "descending" largest first (the first
    hypothesis is the model's top one by convention), "either" largest or smallest first at
    random. `evidence_order` (same values, "none" for no rule) overrides it where
    `partner_ranks` writes `>` after the first listed partner, so the answer's shape there
    depends on that token (see `WarmupSpec`)."""
    for name, value in (("order", order), ("evidence_order", evidence_order)):
        if value not in ORDERS + ("none",) or (name == "order" and value == "none"):
            raise ValueError(f"unknown {name} {value!r}; expected one of "
                             f"{ORDERS if name == 'order' else ('none',) + ORDERS[1:]}")
    pairs = warmup_pairs(view, e, num_particles, rng, t, teacher)
    p = rng.dirichlet(np.ones(num_particles))
    if (evidence_order != "none" and t is not None
            and partner_ranks(view, e, t, approach_order(view, e, t))[1:2] == [">"]):
        order = evidence_order
    if order != "drawn":
        p = np.sort(p)[::-1]
    if order == "either" and rng.random() < 0.5:
        p = p[::-1]
    p = np.round(p, 1)
    p[-1] = round(1.0 - p[:-1].sum(), 1)
    return format_particles(pairs, np.clip(p, 0.0, 1.0), view.labels[e], decimals=1)


def task_records(view: HostEpisodes, stride: int) -> list[dict]:
    """Unlabelled (episode, t) prompts: nothing about the goal is attached."""
    return [{"episode": e, "t": t} for e, t in timestep_records(view, stride)]


class PromptCache:
    """Renders and encodes (episode, t) prompts, cached (they are revisited every epoch)."""

    def __init__(self, config, codec, view: HostEpisodes):
        self.render = get_observation(config.mindzero.data.observation)
        self.n, self.codec, self.view = config.mindzero.data.num_particles, codec, view
        self.cache: dict[tuple[int, int], list[int]] = {}

    def __call__(self, e: int, t: int) -> list[int]:
        if (e, t) not in self.cache:
            self.cache[(e, t)] = self.codec.prompt_ids(self.render(self.view, e, t, self.n))
        return self.cache[(e, t)]


def max_row_len(config, codec, view, completion: int | None = None, quantum: int = 16) -> int:
    """One packed row length for the whole run (longest prompt + completion budget, default
    `trainer.max_new_tokens`), so the jitted update compiles once."""
    d = config.mindzero.data
    render = get_observation(d.observation)
    longest = max(len(codec.prompt_ids(render(view, e, t, d.num_particles)))
                  for e, t in timestep_records(view, d.stride))
    budget = config.trainer.max_new_tokens if completion is None else completion
    return int(np.ceil((longest + budget + 1) / quantum) * quantum)
