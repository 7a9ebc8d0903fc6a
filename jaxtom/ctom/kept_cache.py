"""Each conversation's KV cache, kept between the controller's phases and rounds.

A conversation's next context starts with what its cache already holds: a phase appends
controller tags to the tokens just sampled, and a round appends the new visible turns to the
tokens of h_t (the controller builds contexts as token sequences for that reason). So the
sampler need prefill only the rest. Matching is by token ids, never by bookkeeping: each
conversation keeps the ids whose keys and values fill its first cache slots, and a context
reuses the longest common prefix (the sampler overwrites slots past it and never attends to
them). Any context is handled correctly; the saving depends on contexts extending each other.

The caches of all conversations live in one array, [layers, conversations, kv_heads, slots,
head_dim]; a call gathers its rows (sliced to the slots the call needs, so decode attends
over no more slots than a fresh cache would have) and scatters the result back. On a mesh
the store is sharded like the sampler's own cache (conversations over data x fsdp, kv heads
over tensor) from its creation on: it is never replicated, nor built whole on one device.
"""

from __future__ import annotations

import functools
from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxtom.sampling import loop as sampling_loop

from jaxtom.sampling import sampler
from jaxtom.models.decoder import CACHE_SEQ_AXIS, KVCache


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of two token lists."""
    n = min(len(a), len(b))
    if n == 0:
        return 0
    diff = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(diff[0]) if diff.size else n


def _gather(store: KVCache, rows: jax.Array, slots: int) -> KVCache:
    take = lambda a: jnp.take(a, rows, axis=1, mode="clip")[:, :, :, :slots]  # noqa: E731
    return KVCache(take(store.k), take(store.v))


def _scatter(store: KVCache, rows: jax.Array, part: KVCache) -> KVCache:
    """Writes `part`'s rows into `store` at `rows`; out-of-range ids (batch padding) drop."""
    slots = part.k.shape[CACHE_SEQ_AXIS]
    put = lambda a, p: a.at[:, rows, :, :slots].set(p.astype(a.dtype), mode="drop")  # noqa: E731
    return KVCache(put(store.k, part.k), put(store.v, part.v))


def _zeros(cfg, rows: int, slots: int) -> KVCache:
    return KVCache.zeros(cfg, rows, slots)


def _grown(store: KVCache, rows: int, slots: int) -> KVCache:
    pad = [(0, 0)] * store.k.ndim
    pad[1] = (0, rows - store.k.shape[1])
    pad[CACHE_SEQ_AXIS] = (0, slots - store.k.shape[CACHE_SEQ_AXIS])
    return KVCache(jnp.pad(store.k, pad), jnp.pad(store.v, pad))


@functools.lru_cache(maxsize=None)
def _programs(mesh: Mesh | None):
    """(zeros, grown, gather, scatter) jitted for `mesh`: on a mesh, every cache they return
    is sharded like the sampler's KV cache (`sampling_loop.cache_sharding`: rows over data x
    fsdp, kv heads over tensor), so the store is never replicated and is created sharded;
    without one (an unsharded model), plain jit."""
    if mesh is None:
        return (jax.jit(_zeros, static_argnums=(0, 1, 2)),
                jax.jit(_grown, static_argnums=(1, 2)),
                jax.jit(_gather, static_argnums=(2,)),
                jax.jit(_scatter, donate_argnums=(0,)))
    cache = sampling_loop.cache_sharding(mesh)
    out = KVCache(cache, cache)
    return (jax.jit(_zeros, static_argnums=(0, 1, 2), out_shardings=out),
            jax.jit(_grown, static_argnums=(1, 2), out_shardings=out),
            jax.jit(_gather, static_argnums=(2,), out_shardings=out),
            jax.jit(_scatter, donate_argnums=(0,), out_shardings=out))


def device_bytes(cfg, conversations: int, slots: int, mesh: Mesh | None = None) -> int:
    """Bytes each device holds of a store of `conversations` x `slots` (as `KeptCaches`
    sizes it: rows rounded up to data x fsdp) for `jaxtom plan`-style estimates: the store
    lives through a whole rollout beside the sampler's own cache. Unsharded: the total."""
    dp = 1 if mesh is None else mesh.shape["data"] * mesh.shape["fsdp"]
    tensor = 1 if mesh is None else mesh.shape["tensor"]
    rows = sampler.bucket(conversations, 1, dp) // dp
    heads = -(-cfg.num_kv_heads // tensor)
    return 2 * cfg.num_layers * rows * heads * slots * cfg.head_dim * jnp.dtype(
        cfg.compute_dtype).itemsize


class KeptCaches:
    """Per-conversation KV caches for `sampler.generate`, reused by longest token prefix."""

    def __init__(self, model, max_cache_len: int | None = None, *, min_rows: int = 0,
                 min_slots: int = 0):
        self.model, self.max_cache_len = model, max_cache_len
        self.min_rows, self.min_slots = min_rows, min_slots
        self.store: KVCache | None = None
        self.held: dict[int, list[int]] = {}  # token ids in each conversation's first slots

    def _reserve(self, rows: int, slots: int) -> None:
        """Grows the store (geometrically) to at least `rows` conversations and `slots`;
        rows in multiples of the mesh's data x fsdp, so that they shard evenly."""
        zeros, grown, _, _ = _programs(self.mesh)
        rows = sampler.bucket(rows, 1, self._row_multiple)
        if self.store is None:
            self.store = zeros(self.model.config, rows, slots)
            return
        have_rows, have_slots = self.store.k.shape[1], self.store.k.shape[CACHE_SEQ_AXIS]
        if rows > have_rows or slots > have_slots:
            self.store = grown(self.store, max(have_rows, rows), max(have_slots, slots))

    @property
    def mesh(self) -> Mesh | None:
        return sampler.model_mesh(self.model)

    @property
    def _row_multiple(self) -> int:
        mesh = self.mesh
        return 1 if mesh is None else mesh.shape["data"] * mesh.shape["fsdp"]

    def _rows(self, rows: np.ndarray) -> jax.Array:
        """Row ids as an array every process passes alike (replicated on the mesh)."""
        mesh = self.mesh
        if mesh is None:
            return jnp.asarray(rows)
        return jax.device_put(rows, NamedSharding(mesh, PartitionSpec()))

    def plan(self, contexts: Sequence[Sequence[int]], conversations: Sequence[int]
             ) -> tuple[list[int], list[list[int]]]:
        """(cache slots each row resumes from, the tokens each row must prefill)."""
        starts, chunks = [], []
        for conv, ctx in zip(conversations, contexts):
            ctx = list(map(int, ctx))
            if not ctx:
                raise ValueError("every context must contain at least one token")
            # at least one token is prefilled: its logits choose the first new token
            start = min(common_prefix(self.held.get(conv, []), ctx), len(ctx) - 1)
            starts.append(start)
            chunks.append(ctx[start:])
        return starts, chunks

    def generate(self, contexts: Sequence[Sequence[int]], conversations: Sequence[int], *,
                 max_new_tokens: int, buffer_len: int | None = None, **kwargs):
        """`sampler.generate(model, contexts, ...)`, prefilling only what each conversation's
        cache lacks; returns (its GenerationResult, tokens prefilled per row)."""
        if len(set(conversations)) != len(conversations):
            raise ValueError("a call holds each conversation at most once")
        if buffer_len is None:
            buffer_len = sampler.bucket(max_new_tokens, 16)  # generate's own default
        starts, chunks = self.plan(contexts, conversations)
        batch, slots = sampler.call_shape(self.model, starts, [len(c) for c in chunks],
                                           buffer_len, self.max_cache_len)
        # fixed shapes (a small model whose calls cost less than their compiles): every call
        # pads to at least min_rows rows and min_slots slots, so a few programs serve a run
        batch = max(batch, sampler.bucket(self.min_rows, 1, self._row_multiple))
        slots = max(slots, self.min_slots)
        self._reserve(max(conversations) + 1, slots)
        _, _, gather, scatter = _programs(self.mesh)
        n_store = self.store.k.shape[1]
        rows = np.full(batch, n_store, np.int32)  # padding rows: gathered clipped, never stored
        rows[:len(conversations)] = conversations
        rows = self._rows(rows)
        cache = gather(self.store, rows, slots)
        resume = sampler.ResumeState(cache, np.asarray(starts, np.int32))
        out = sampler.generate(self.model, chunks, max_new_tokens=max_new_tokens,
                                buffer_len=buffer_len, resume=resume,
                                max_cache_len=self.max_cache_len, **kwargs)
        part = out.state.cache
        self._reserve(n_store, part.k.shape[CACHE_SEQ_AXIS])
        self.store = scatter(self.store, rows, part)
        for conv, ctx, new, length in zip(conversations, contexts, out.sequences(),
                                          out.state.lengths):
            held = list(map(int, ctx)) + new[:-1]  # the last new token is not in the cache
            if len(held) != int(length):
                raise RuntimeError(f"conversation {conv}: cache holds {int(length)} slots, "
                                   f"expected {len(held)}")
            self.held[conv] = held
        return out, [len(c) for c in chunks]

    def release(self) -> None:
        """Drops every kept cache (its keys and values belong to the current weights)."""
        self.store, self.held = None, {}
