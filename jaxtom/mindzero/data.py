"""Training data: unlabelled episodes unrolled into timesteps (MindZero appendix B.2).

Every (episode, t) with 1 <= t < length is one prompt; nothing about the goal is attached, so
the pipeline is label-free by construction. The `grain` pipeline shuffles, repeats (epochs)
and batches the records deterministically from a seed; the prompts are rendered lazily in the
`map` step. Warm-up targets (format only) are random valid goal pairs that follow the
prompt's nearest-first rule and are never the episode's true goal.
"""

from __future__ import annotations

import grain
import numpy as np

from jaxtom.mindzero.observation import HostEpisodes, get_observation
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


def warmup_pairs(view: HostEpisodes, e: int, num_particles: int, rng: np.random.Generator):
    """Random distinct goal pairs, object1 the one nearer the human's start (ties to the lower
    id, as the prompt instructs), excluding the true goal: labels never leak."""
    start = view.dist[e, view.start_cell[e], view.obj_cell[e, 0]]
    true = tuple(int(g) for g in view.goal[e])
    pairs = [(a, b) for a in range(len(start)) for b in range(len(start))
             if a != b and (start[a] < start[b] or (start[a] == start[b] and a < b))]
    pairs = [p for p in pairs if p != true and p[::-1] != true]
    chosen = rng.choice(len(pairs), num_particles, replace=False)
    return [pairs[i] for i in chosen]


def warmup_target(view: HostEpisodes, e: int, num_particles: int,
                  rng: np.random.Generator) -> str:
    """A well-formed completion with random valid particles and random probabilities."""
    pairs = warmup_pairs(view, e, num_particles, rng)
    p = rng.dirichlet(np.ones(num_particles))
    p = np.round(p, 1)
    p[-1] = round(1.0 - p[:-1].sum(), 1)
    return format_particles(pairs, np.clip(p, 0.0, 1.0), view.labels[e], decimals=1)
