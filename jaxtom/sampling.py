"""Batched generation with a KV cache: one jitted prefill + `lax.while_loop` decode.

Every row keeps its own cache length, so prompts of different lengths need no left padding
and RoPE positions stay exact. The cache is donated into the jitted call and handed back in
`GenerationResult.state`; passing that state to the next `generate` call appends new tokens
after what is already cached (the CToM controller's phase-by-phase use), costing only the
new tokens' prefill.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxtom import parallel
from jaxtom.models.decoder import CACHE_AXES, CACHE_SEQ_AXIS, Decoder, KVCache
from jaxtom.stop_strings import MATCHED, find_stop, stop_tables


@dataclasses.dataclass
class ResumeState:
    """What a later `generate` call needs to continue each row; usable once (cache donated)."""
    cache: KVCache
    lengths: np.ndarray  # valid cache slots per row
    pending: np.ndarray  # last generated token per row, not yet in the cache


class GenerationResult(NamedTuple):
    tokens: np.ndarray  # [batch, max_new_tokens] int32, pad_id after each row's length
    logprobs: np.ndarray  # [batch, max_new_tokens] float32 log p(token) at temperature 1
    lengths: np.ndarray  # [batch] new tokens per row, stop token included
    finished: np.ndarray  # [batch] bool: a stop id or string ended the row
    texts: list[str] | None  # decoded new text (cut after the stop string) if a tokenizer
    state: ResumeState

    def sequences(self) -> list[list[int]]:
        return [row[:n].tolist() for row, n in zip(self.tokens, self.lengths)]


def row_keys(key: jax.Array, row_ids: jax.Array) -> jax.Array:
    """One key per row, `fold_in(key, row_id)`: a row's draws then depend on its own id only,
    not on which rows share the batch, so a process sampling a shard of the prompts (with
    their global ids) draws exactly what one process sampling them all would."""
    return jax.vmap(jax.random.fold_in, in_axes=(None, 0))(key, row_ids)


def step_keys(keys: jax.Array, step: jax.Array) -> jax.Array:
    """The keys of one decode step: each row key folded with the step index."""
    return jax.vmap(jax.random.fold_in, in_axes=(0, None))(keys, step)


def choose_tokens(logits, keys, temperature, top_k, top_p, use_filter: bool, greedy: bool = False):
    """Samples (or argmaxes when temperature <= 0) one token per row; returns token, logprob.

    `keys` holds one key per row (see `row_keys`): each row's Gumbel noise comes from its own
    key alone, so it does not depend on the batch size or the other rows.
    `greedy` is static: it skips drawing Gumbel noise, which costs more than the argmax.
    """
    logits = logits.astype(jnp.float32)
    logp = jax.nn.log_softmax(logits, axis=-1)
    if greedy:
        token = jnp.argmax(logits, axis=-1).astype(jnp.int32)
        return token, jnp.take_along_axis(logp, token[:, None], axis=-1)[:, 0]
    scaled = logits / jnp.maximum(temperature, 1e-6)
    if use_filter:
        desc = -jnp.sort(-scaled, axis=-1)
        vocab = scaled.shape[-1]
        kth = jnp.where(top_k > 0, desc[:, jnp.clip(top_k - 1, 0, vocab - 1)], -jnp.inf)
        probs = jax.nn.softmax(desc, axis=-1)
        before = jnp.cumsum(probs, axis=-1) - probs  # mass strictly above each entry
        kept = jnp.where(before < top_p, desc, jnp.inf)
        nucleus = jnp.min(kept, axis=-1)
        threshold = jnp.maximum(kth, nucleus)[:, None]
        scaled = jnp.where(scaled < threshold, -jnp.inf, scaled)
    sampled = jax.vmap(lambda k, row: jax.random.categorical(k, row))(keys, scaled)
    token = jnp.where(temperature <= 0, jnp.argmax(logits, axis=-1), sampled).astype(jnp.int32)
    return token, jnp.take_along_axis(logp, token[:, None], axis=-1)[:, 0]


def _generate_core(graphdef, max_new, use_filter, greedy, pad_id, state, cache, tokens, chunk_lens,
                   starts, active, row_ids, key, temperature, top_k, top_p, stop_ids, tables):
    model = nnx.merge(graphdef, state)
    B = tokens.shape[0]
    n_str = tables.shape[0]

    def stopped(tok, sstate):
        hit = jnp.isin(tok, stop_ids)
        if n_str:
            sstate = tables[jnp.arange(n_str)[None, :], sstate, tok[:, None]].astype(jnp.int32)
            hit = hit | jnp.any(sstate == MATCHED, axis=-1)
            sstate = jnp.maximum(sstate, 0)
        return hit, sstate

    logits, cache = model.forward_cached(tokens, cache, starts)
    # the decode loop runs on per-layer weights and caches: see Decoder.forward_layers_cached
    layers = model.layer_arrays()
    cache = (tuple(cache.k), tuple(cache.v))
    last = jnp.take_along_axis(logits, (chunk_lens - 1)[:, None, None], axis=1)[:, 0]
    rkeys = row_keys(key, row_ids)
    tok, lp = choose_tokens(last, step_keys(rkeys, 0), temperature, top_k, top_p, use_filter, greedy)
    out_tok = jnp.full((B, max_new), pad_id, jnp.int32).at[:, 0].set(tok)
    out_lp = jnp.zeros((B, max_new), jnp.float32).at[:, 0].set(lp)
    hit, sstate = stopped(tok, jnp.zeros((B, n_str), jnp.int32))
    n_gen = jnp.ones((B,), jnp.int32)
    carry = (jnp.int32(1), cache, starts + chunk_lens, tok, hit | ~active | (max_new <= 1),
             hit, sstate, out_tok, out_lp, n_gen)

    def cond(c):
        return (c[0] < max_new) & ~jnp.all(c[4])

    def body(c):
        step, cache, lengths, tok, done, finished, sstate, out_tok, out_lp, n_gen = c
        logits, keys, values = model.forward_layers_cached(tok[:, None], cache[0], cache[1],
                                                           lengths, layers)
        cache = (tuple(keys), tuple(values))
        lengths = lengths + (~done).astype(jnp.int32)
        new, lp = choose_tokens(logits[:, 0], step_keys(rkeys, step), temperature, top_k, top_p, use_filter,
                                greedy)
        hit, new_sstate = stopped(new, sstate)
        out_tok = out_tok.at[:, step].set(jnp.where(done, pad_id, new))
        out_lp = out_lp.at[:, step].set(jnp.where(done, 0.0, lp))
        n_gen = n_gen + (~done).astype(jnp.int32)
        finished = finished | (hit & ~done)
        sstate = jnp.where(done[:, None], sstate, new_sstate)
        tok = jnp.where(done, tok, new)
        done = done | hit | (n_gen >= max_new)
        return (step + 1, cache, lengths, tok, done, finished, sstate, out_tok, out_lp, n_gen)

    _, cache, lengths, tok, _, finished, _, out_tok, out_lp, n_gen = jax.lax.while_loop(
        cond, body, carry)
    cache = KVCache(jnp.stack(cache[0]), jnp.stack(cache[1]))
    return out_tok, out_lp, n_gen, finished, cache, lengths, tok


_COMPILED: dict[Any, Any] = {}


def _compiled(graphdef, statics, mesh, state):
    key = (graphdef, statics, mesh)
    if key not in _COMPILED:
        fn = lambda *args: _generate_core(graphdef, *statics, *args)  # noqa: E731
        if mesh is None:
            _COMPILED[key] = jax.jit(fn, donate_argnums=(1,))
        else:
            rep = NamedSharding(mesh, PartitionSpec())
            row = NamedSharding(mesh, PartitionSpec(parallel.BATCH_AXES))
            mat = NamedSharding(mesh, PartitionSpec(parallel.BATCH_AXES, None))
            cache = cache_sharding(mesh)
            params = jax.tree.map(lambda x: x.sharding, state)
            _COMPILED[key] = jax.jit(
                fn, donate_argnums=(1,),
                in_shardings=(params, KVCache(cache, cache), mat, row, row, row, row, rep, rep,
                              rep, rep, rep, rep),
                out_shardings=(mat, mat, row, row, KVCache(cache, cache), row, row))
    return _COMPILED[key]


def cache_sharding(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, parallel.logical_to_spec(CACHE_AXES))


def model_mesh(model: Decoder) -> Mesh | None:
    """The mesh the model's parameters live on, if they are NamedSharding-placed."""
    sharding = getattr(model.embed_tokens[...], "sharding", None)
    return sharding.mesh if isinstance(sharding, NamedSharding) else None


def _bucket(n: int, quantum: int) -> int:
    return max(quantum, int(math.ceil(n / quantum)) * quantum)


def _split_stops(stop, tokenizer, eos_ids):
    ids = [int(s) for s in stop if not isinstance(s, str)] + list(eos_ids)
    strings = sorted({s for s in stop if isinstance(s, str)})
    if strings and tokenizer is None:
        raise ValueError(f"stop strings {strings} need tokenizer= to map tokens to text")
    return ids, strings


def generate(model: Decoder, prompts: Sequence[Sequence[int]] | Sequence[str], *,
             max_new_tokens: int, temperature: float = 1.0, top_p: float = 1.0, top_k: int = 0,
             stop: Sequence[int | str] = (), key: jax.Array | None = None, tokenizer=None,
             resume: ResumeState | None = None, stop_at_eos: bool = True,
             max_cache_len: int | None = None, pad_id: int = 0,
             row_ids: Sequence[int] | np.ndarray | None = None) -> GenerationResult:
    """Generates up to `max_new_tokens` per prompt; temperature <= 0 means greedy.

    `prompts` are token-id lists (or strings with `tokenizer=`); with `resume=` they are the
    tokens to append to each row's cached sequence before generating again.

    Row i samples with `fold_in(fold_in(key, row_ids[i]), step)` (`row_ids` defaults to
    0..B-1), so its tokens depend only on its prompt, the key and its id: a process that
    samples `prompts[a:b]` with `row_ids=range(a, b)` gets the rows a single process
    sampling all prompts would. Resuming restarts the step count: pass a fresh key.
    """
    cfg = model.config
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    if top_k < 0:
        raise ValueError(f"top_k must be >= 0 (0 disables it), got {top_k}")
    if key is None:
        if temperature > 0:
            raise ValueError("sampling with temperature > 0 needs an explicit PRNG key=")
        key = jax.random.key(0)
    if any(isinstance(p, str) for p in prompts):
        if tokenizer is None:
            raise ValueError("string prompts need tokenizer=")
        prompts = [tokenizer.encode(p) if isinstance(p, str) else p for p in prompts]
    rows = [list(map(int, p)) for p in prompts]
    if resume is not None:
        if len(rows) != len(resume.lengths):
            raise ValueError(f"resume state has {len(resume.lengths)} rows, got {len(rows)}")
        rows = [[int(t)] + r for t, r in zip(resume.pending, rows)]
    if not rows or any(len(r) == 0 for r in rows):
        raise ValueError("every prompt must contain at least one token")
    if any(t < 0 or t >= cfg.vocab_size for r in rows for t in r):
        raise ValueError(f"prompt token ids must lie in [0, {cfg.vocab_size})")
    stop_ids, stop_strs = _split_stops(stop, tokenizer, cfg.eos_token_ids if stop_at_eos else ())

    n_real = len(rows)
    if row_ids is None:
        ids = np.arange(n_real, dtype=np.int64)
    else:
        ids = np.asarray(row_ids).astype(np.int64).reshape(-1)
        if ids.shape != (n_real,):
            raise ValueError(f"row_ids has {ids.size} entries for {n_real} prompts")
        if ids.size and (ids.min() < 0 or ids.max() >= 2 ** 32):
            raise ValueError("row_ids must lie in [0, 2**32)")
    mesh = model_mesh(model)
    multiple = 1 if mesh is None else mesh.shape["data"] * mesh.shape["fsdp"]
    B = _bucket(n_real, multiple)
    rows = rows + [[pad_id]] * (B - n_real)
    starts = np.zeros(B, np.int32)
    if resume is not None:
        starts[:n_real] = resume.lengths
    T = _bucket(max(map(len, rows)), 8)
    need = int(starts.max()) + T + max_new_tokens
    limit = min(max_cache_len or cfg.max_position_embeddings, cfg.max_position_embeddings)
    longest = int(max(s + len(r) for s, r in zip(starts, rows))) + max_new_tokens
    if longest > limit:
        raise ValueError(f"prompt of {longest - max_new_tokens} tokens plus max_new_tokens="
                         f"{max_new_tokens} exceeds the cache length {limit}")
    S = _bucket(need, 64)
    if resume is not None and resume.cache.k.shape[CACHE_SEQ_AXIS] >= need:
        cache = resume.cache
    else:
        cache = KVCache.zeros(cfg, B, S) if resume is None else _grow(resume.cache, B, S)
    tokens = np.full((B, T), pad_id, np.int32)
    for i, r in enumerate(rows):
        tokens[i, :len(r)] = r
    lens = np.asarray([len(r) for r in rows], np.int32)
    active = np.arange(B) < n_real
    ids = np.concatenate([ids, np.zeros(B - n_real, np.int64)]).astype(np.uint32)
    tables = stop_tables(stop_strs, tokenizer.token_texts()) if stop_strs else np.zeros(
        (0, 1, cfg.vocab_size), np.int16)

    graphdef, state = nnx.split(model)
    greedy = temperature <= 0
    use_filter = not greedy and (top_k > 0 or top_p < 1.0)
    fn = _compiled(graphdef, (max_new_tokens, use_filter, greedy, pad_id), mesh, state)
    if mesh is not None:
        cache = jax.device_put(cache, KVCache(cache_sharding(mesh), cache_sharding(mesh)))
    out = fn(state, cache, tokens, lens, starts, active, ids, key, jnp.float32(temperature),
             jnp.int32(top_k), jnp.float32(top_p), jnp.asarray(stop_ids or [-1], jnp.int32),
             jnp.asarray(tables))
    out_tok, out_lp, n_gen, finished, cache, lengths, pending = out
    out_tok, out_lp, n_gen, finished, lengths, pending = jax.device_get(
        (out_tok, out_lp, n_gen, finished, lengths, pending))
    texts = None
    if tokenizer is not None:
        texts = []
        for row, n in zip(out_tok[:n_real], n_gen[:n_real]):
            text = tokenizer.decode(row[:n].tolist())
            end = find_stop(text, stop_strs)
            texts.append(text if end is None else text[:end])
    new_state = ResumeState(cache, np.asarray(lengths[:n_real]), np.asarray(pending[:n_real]))
    return GenerationResult(np.asarray(out_tok[:n_real]), np.asarray(out_lp[:n_real]),
                            np.asarray(n_gen[:n_real]), np.asarray(finished[:n_real]), texts,
                            new_state)


def _grow(cache: KVCache, batch: int, length: int) -> KVCache:
    """Pads a resumed cache to more slots (and padded batch rows) when it is too short."""
    pad = [(0, 0)] * cache.k.ndim
    pad[1] = (0, batch - cache.k.shape[1])
    pad[CACHE_SEQ_AXIS] = (0, length - cache.k.shape[CACHE_SEQ_AXIS])
    return KVCache(jnp.pad(cache.k, pad), jnp.pad(cache.v, pad))
