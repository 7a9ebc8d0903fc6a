"""Which positions an update scores, and how many per row: the static scoring widths read
from a batch's masks on the host (over every process's rows) before the update compiles."""

from __future__ import annotations

import jax
import numpy as np
from jax.experimental import multihost_utils

from jaxtom.rl import logprobs
from jaxtom.rl.batch import Batch


def local_rows(x) -> dict:
    """This process's rows of a [R, T] array as NumPy, keyed by their row range."""
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        return {(s.index[0].start, s.index[0].stop): np.asarray(s.data)
                for s in x.addressable_shards}
    return {(None, None): np.asarray(x)}


def max_scored(*masks) -> int:
    """Most entries any row scores: positions past the first where any of `masks` (None
    skipped) is nonzero, over every process's rows (all processes must call it)."""
    parts = [local_rows(m) for m in masks if m is not None]
    local = 0
    for key in parts[0]:
        hit = np.logical_or.reduce([p[key] > 0 for p in parts])
        local = max(local, int(hit[:, 1:].sum(axis=1).max(initial=0)))
    if jax.process_count() > 1:
        local = int(np.max(multihost_utils.process_allgather(np.asarray([local]))))
    return local


def score_widths(batch: Batch) -> tuple[int, int]:
    """Static (policy-row, prediction-row) scoring widths of `batch` (see module docstring)."""
    width = logprobs.bucket_width(max_scored(batch.policy_mask, batch.decision_mask),
                                  batch.tokens.shape[1])
    p = batch.prediction
    pwidth = 0 if p is None else logprobs.bucket_width(max_scored(p.target_mask),
                                                       p.tokens.shape[1])
    return width, pwidth


def scored_positions(batch: Batch) -> jax.Array:
    """Positions a policy row's losses read: policy tokens and decision tokens."""
    hit = batch.policy_mask > 0
    return hit if batch.decision_mask is None else hit | (batch.decision_mask > 0)
