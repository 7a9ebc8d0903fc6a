"""Decoding in segments that drop finished rows and attend over the cache slots in use.

One `while_loop` over a fixed batch keeps computing rows that have already stopped and
attends over every slot of the cache bucket, so a ragged GRPO batch (completions of 16 to
512 tokens) pays for its longest row in every row. Here the decode loop pauses every
`SEGMENT` steps (`SamplingInputs.stop_step`, a run-time value: no recompile); the host then
keeps only the rows still going and a cache cut to the slot count (a power of four) the next
segment can reach. Each row keeps its id (so its key), its cache and its output buffer, so
the tokens are the ones the single loop draws; logits may differ in the last bits (sums over
a different number of masked slots or rows).

Compiles are bounded by two fixed ladders, whatever the lengths: rows halve from the call's
batch B (B, B/2, B/4, ... rounded up to the mesh's multiple, never below `MIN_ROWS`), one
rung per regroup, and slots take powers of four from 64 up to the full cache. A program per
ladder state met: decode loops (rows x slots), row takes (one per rung and slot count) and
slot fits (one per target slot count and rows), so a batch of B rows and S slots compiles at
most log2(B / MIN_ROWS) + 1 rungs times log4(S / 64) + 1 slot counts of each. Below
`MIN_ROWS` a decode step costs about the same whatever the rows (the weights are read once
per step), so the ladder stops there rather than meet more programs.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxtom import parallel
from jaxtom.models.decoder import CACHE_SEQ_AXIS, KVCache

SEGMENT = 32  # decode steps between the host's looks at which rows are still going
MIN_SLOTS = 64
MIN_ROWS = 4  # the row ladder's last rung (rounded up to the mesh's multiple)


def slot_bucket(needed: int, full: int) -> int:
    """The slots a segment needs, in powers of four from 64 (64, 256, 1024, ...), never
    above the full cache. Powers of two ran no faster on the ragged benchmark (0.391 vs
    0.395 s) and met twice as many (rows, slots) programs."""
    size = MIN_SLOTS
    while size < needed:
        size *= 4
    return min(size, full)


def next_rung(rows: int, multiple: int) -> int:
    """The row ladder's rung below `rows`: half of it, rounded up to `multiple`."""
    half = -(-rows // 2)
    return -(-half // multiple) * multiple


def row_floor(batch: int, multiple: int) -> int:
    """The ladder's last rung for a call of `batch` rows."""
    return -(-min(batch, MIN_ROWS) // multiple) * multiple


def _fit_slots(x: jax.Array, slots: int) -> jax.Array:
    have = x.shape[CACHE_SEQ_AXIS]
    if have >= slots:
        return jax.lax.slice_in_dim(x, 0, slots, axis=CACHE_SEQ_AXIS)
    pad = [(0, 0)] * x.ndim
    pad[CACHE_SEQ_AXIS] = (0, slots - have)
    return jnp.pad(x, pad)


_FIT: dict[int, object] = {}


def _fit_program(slots: int):
    """The jitted cut or zero-pad of a cache to `slots` slots, named for its target (the
    compile log then tells the programs of different targets apart)."""
    if slots not in _FIT:
        def fit(cache: KVCache) -> KVCache:
            return KVCache(_fit_slots(cache.k, slots), _fit_slots(cache.v, slots))
        fit.__name__ = fit.__qualname__ = f"fit_slots_{slots}"
        _FIT[slots] = jax.jit(fit)
    return _FIT[slots]


@jax.jit
def _take_rows(cache: KVCache, state, index, keep):
    """Rows `index` of the cache and loop state (padding rows: `keep` False, marked done)."""
    take = lambda x: jnp.take(x, index, axis=0)  # noqa: E731
    cache = KVCache(jnp.take(cache.k, index, axis=1), jnp.take(cache.v, index, axis=1))
    state = state.replace(lengths=take(state.lengths), token=take(state.token),
                          done=take(state.done) | ~keep, finished=take(state.finished) & keep,
                          stop_state=take(state.stop_state), tokens=take(state.tokens),
                          logprobs=take(state.logprobs), n_new=take(state.n_new))
    return cache, state


def _placed(mesh, cache, state, row_ids):
    """Puts regrouped arrays where the decode program's shardings expect them."""
    if mesh is None:
        return cache, state, row_ids
    from jaxtom.sampling.loop import cache_sharding, input_shardings, state_sharding
    sh = cache_sharding(mesh)
    cache = jax.device_put(cache, KVCache(sh, sh))
    state = jax.device_put(state, state_sharding(mesh))
    row_ids = jax.device_put(row_ids, input_shardings(mesh)[1].row_ids)
    return cache, state, row_ids


def decode_segments(decode, params, cache: KVCache, state, inputs, *, n_real: int,
                    max_new: int, multiple: int, mesh=None) -> dict[str, np.ndarray]:
    """Runs `decode` (the sampler's loop program) to the end in segments, dropping finished
    rows between them; returns the host outputs of the `n_real` rows in their order: tokens,
    logprobs, n_new, finished, lengths, token (the last one, not cached) and steps."""
    B = cache.k.shape[1]
    full_slots = cache.k.shape[CACHE_SEQ_AXIS]
    floor = row_floor(B, multiple)
    origin = np.where(np.arange(B) < n_real, np.arange(B), -1)
    row_ids = np.asarray(parallel.host_value(inputs.row_ids))
    fields = ("tokens", "logprobs", "n_new", "finished", "lengths", "token")
    host = {k: np.asarray(parallel.host_value(getattr(state, k))) for k in fields + ("done",)}
    out = {k: host[k][:n_real].copy() for k in fields}  # rows that stop at their first token
    step = int(parallel.host_value(state.step))
    lengths, live = host["lengths"], (origin >= 0) & ~host["done"]
    while True:
        if step >= max_new or not live.any():
            break
        moved = False
        rows = cache.k.shape[1]
        while rows > floor and max(next_rung(rows, multiple), floor) >= int(live.sum()):
            rows = max(next_rung(rows, multiple), floor)  # one rung: few take programs
            kept = np.flatnonzero(live)
            index = np.concatenate([kept, np.full(rows - len(kept), kept[0])]).astype(np.int32)
            keep = np.arange(rows) < len(kept)
            cache, state = _take_rows(cache, state, *_replicated(mesh, index, keep))
            origin, row_ids = np.where(keep, origin[index], -1), row_ids[index]
            lengths, live = lengths[index], keep
            moved = True
        slots = slot_bucket(int(lengths[live].max()) + SEGMENT + 1, full_slots)
        if slots != cache.k.shape[CACHE_SEQ_AXIS]:
            cache = _fit_program(slots)(cache)
            moved = True
        if moved:
            cache, state, placed_ids = _placed(mesh, cache, state, row_ids)
            inputs = inputs._replace(row_ids=placed_ids)
        stop = np.int32(min(max_new, step + SEGMENT))
        if mesh is not None:
            from jaxtom.sampling.loop import input_shardings
            stop = jax.device_put(stop, input_shardings(mesh)[1].stop_step)
        cache, state = decode(params, cache, state, inputs._replace(stop_step=stop))
        host = {k: np.asarray(parallel.host_value(getattr(state, k))) for k in fields + ("done",)}
        step = int(parallel.host_value(state.step))
        real = origin >= 0
        for k in fields:
            out[k][origin[real]] = host[k][real]
        lengths, live = host["lengths"], real & ~host["done"]
    out["steps"] = step
    return out


def _replicated(mesh, *arrays):
    """Host index arrays as a program over `mesh` takes them (replicated device arrays: a
    program over a multi-process mesh takes no host arrays)."""
    if mesh is None:
        return arrays
    from jaxtom.sampling.loop import input_shardings
    return jax.device_put(arrays, input_shardings(mesh)[1].key)
