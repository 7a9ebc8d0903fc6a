"""The sampler's device side: the jitted prefill and `while_loop` decode programs, their static
settings and run-time inputs, and how each row picks its next token (`jaxtom.sampling.sampler.generate`
sizes and calls them; `jaxtom.plan` compiles them on abstract inputs).

Sampling is per row: row i's token at step t is drawn with `fold_in(fold_in(key, row_ids[i]),
t)`, so a row's tokens depend only on its prompt, the key and its id.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
from flax import nnx, struct
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxtom import parallel
from jaxtom.models.decoder import CACHE_AXES, CACHE_SEQ_AXIS, KVCache
from jaxtom.sampling.stop_strings import MATCHED


@dataclasses.dataclass(frozen=True)
class LoopConfig:
    """The sampler loop's static settings: hashable, part of the compiled program's cache key.

    Everything else (temperature, top-k/p, the token cap, stop ids) is a traced value, so
    changing it reuses the compiled loop.
    """
    buffer_len: int  # columns of the output buffer; the run-time cap is at most this
    greedy: bool  # argmax only: skips drawing Gumbel noise, which costs more than the argmax
    use_filter: bool  # top-k / top-p filtering (a sort of the vocabulary per step)
    pad_id: int  # written after each row's last token


@struct.dataclass
class LoopState:
    """What the decode `while_loop` carries from one step to the next."""
    step: jax.Array  # [] int32: tokens produced per row so far (the next buffer column)
    keys: tuple[jax.Array, ...]  # per-layer key caches [B, kv_heads, slots, head_dim] (decode)
    values: tuple[jax.Array, ...]  # per-layer value caches, same shape
    lengths: jax.Array  # [B] int32 cache slots holding real tokens
    token: jax.Array  # [B] int32 last token, not yet written into the cache
    done: jax.Array  # [B] bool: the row produces nothing more
    finished: jax.Array  # [B] bool: a stop id or string ended the row
    stop_state: jax.Array  # [B, n_stop_strings] int32 matched-prefix length per automaton
    tokens: jax.Array  # [B, buffer_len] int32 output buffer
    logprobs: jax.Array  # [B, buffer_len] float32
    n_new: jax.Array  # [B] int32 tokens produced per row (stop token included)


class PromptChunk(NamedTuple):
    """The tokens the prefill appends to each row; its shapes key the prefill program only.

    Rows with the same prompt (a GRPO group's samples) may share one chunk row: the chunk
    then has U < B rows, is prefilled once, and batch row b reads chunk row `source[b]`.
    """
    tokens: jax.Array  # [U, T] prompt chunk, padded
    chunk_lens: jax.Array  # [U] real tokens in each chunk row
    starts: jax.Array  # [U] cache slots already filled (resume), else 0
    active: jax.Array  # [B] bool: a real row (not batch padding)
    source: jax.Array  # [B] int32: the chunk row of each batch row (arange(B) when U = B)


class SamplingInputs(NamedTuple):
    """Per-call sampling values (traced: new values never recompile)."""
    row_ids: jax.Array  # [B] uint32: the id each row's key is folded with
    key: jax.Array  # raw key data (`jax.random.key_data`): placeable on any mesh
    max_new: jax.Array  # [] int32 run-time cap on new tokens, <= LoopConfig.buffer_len
    temperature: jax.Array
    top_k: jax.Array
    top_p: jax.Array
    stop_ids: jax.Array  # [n] int32, -1 padded
    stop_tables: jax.Array  # [n_strings, depth, vocab] int16 (see jaxtom.sampling.stop_strings)
    explore_after: jax.Array  # [m] int32, -1 padded: the token after one of these is drawn
    explore_temperature: jax.Array  # at this temperature instead (see `generate`),
    explore_tokens: jax.Array  # [k] int32, -1 padded: from these ids only (all if none)
    stop_step: jax.Array  # [] int32: the decode loop pauses before this step (a segment's
    # end, so the host can drop finished rows); rows are not marked done by it


def row_keys(key: jax.Array, row_ids: jax.Array) -> jax.Array:
    """One key per row, `fold_in(key, row_id)`: a row's draws then depend on its own id only,
    not on which rows share the batch, so a process sampling a shard of the prompts (with
    their global ids) draws exactly what one process sampling them all would."""
    return jax.vmap(jax.random.fold_in, in_axes=(None, 0))(key, row_ids)


def step_keys(keys: jax.Array, step: jax.Array) -> jax.Array:
    """The keys of one decode step: each row key folded with the step index."""
    return jax.vmap(jax.random.fold_in, in_axes=(0, None))(keys, step)


def choose_tokens(logits, keys, temperature, top_k, top_p, use_filter: bool, greedy: bool = False,
                  allowed=None):
    """Samples (or argmaxes when temperature <= 0) one token per row; returns token, logprob.

    `temperature` is a scalar or one value per row [B]; `allowed` ([B, V] bool, optional)
    restricts the draw, not the returned log-prob (the model's at temperature 1).

    `keys` holds one key per row (see `row_keys`): each row's Gumbel noise comes from its own
    key alone, so it does not depend on the batch size or the other rows.
    `greedy` is static: it skips drawing Gumbel noise, which costs more than the argmax.
    """
    logits = logits.astype(jnp.float32)
    logp = jax.nn.log_softmax(logits, axis=-1)
    if greedy:
        token = jnp.argmax(logits, axis=-1).astype(jnp.int32)
        return token, jnp.take_along_axis(logp, token[:, None], axis=-1)[:, 0]
    temperature = jnp.broadcast_to(jnp.asarray(temperature, jnp.float32), logits.shape[:1])
    scaled = logits / jnp.maximum(temperature, 1e-6)[:, None]
    if allowed is not None:
        scaled = jnp.where(allowed, scaled, -jnp.inf)
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


# Python-side count of traces of the two programs; tests read it to check that varied prompt
# lengths and token caps compile a bounded number of programs.
TRACE_COUNT: dict[str, int] = {"prefill": 0, "decode": 0}


class _Sampler:
    """Token choice and stop detection shared by the prefill and the decode programs."""

    def __init__(self, config: LoopConfig, inp: SamplingInputs):
        self.config, self.inp = config, inp
        self.keys = row_keys(jax.random.wrap_key_data(inp.key), inp.row_ids)

    def choose(self, logits, step, previous=None):
        """The next token per row; `previous` (the row's last token, None for the first)
        selects `explore_temperature` after an `explore_after` id."""
        inp = self.inp
        temperature, allowed = inp.temperature, None
        if previous is not None:
            hot = jnp.isin(previous, inp.explore_after)
            temperature = jnp.where(hot, inp.explore_temperature, temperature)
            ids = jnp.arange(logits.shape[-1])
            candidate = jnp.isin(ids, inp.explore_tokens) | (inp.explore_tokens[0] < 0)
            allowed = ~hot[:, None] | candidate[None, :]
        return choose_tokens(logits, step_keys(self.keys, step), temperature, inp.top_k,
                             inp.top_p, self.config.use_filter, self.config.greedy, allowed)

    def stopped(self, tok, sstate):
        """(did `tok` stop the row, the stop-string automata's next states)."""
        tables = self.inp.stop_tables
        hit = jnp.isin(tok, self.inp.stop_ids)
        n_str = tables.shape[0]
        if n_str:
            sstate = tables[jnp.arange(n_str)[None, :], sstate, tok[:, None]].astype(jnp.int32)
            hit = hit | jnp.any(sstate == MATCHED, axis=-1)
            sstate = jnp.maximum(sstate, 0)
        return hit, sstate


def _prefill(graphdef, config: LoopConfig, params, cache: KVCache, chunk: PromptChunk,
             inp: SamplingInputs) -> tuple[KVCache, LoopState]:
    """Runs the prompt chunk through the cache and chooses each row's first token.

    A program of its own, so that the decode loop (the expensive one to compile: its layers
    are unrolled) does not depend on the prompt chunk's length. The cache goes out stacked,
    as it came in (the state's per-layer fields are left empty), so each program can reuse
    its donated input buffer for its output.
    """
    TRACE_COUNT["prefill"] += 1
    model = nnx.merge(graphdef, params)
    sampler = _Sampler(config, inp)
    B, U = chunk.active.shape[0], chunk.tokens.shape[0]
    starts, lens = chunk.starts, chunk.chunk_lens
    if U == B:
        logits, cache = model.forward_cached(chunk.tokens, cache, starts, last=lens - 1)
        last = logits[:, 0]
    else:  # shared prompts: prefill each once, then give every row its prompt's cache
        shared = KVCache.zeros(model.config, U, cache.k.shape[CACHE_SEQ_AXIS])
        logits, shared = model.forward_cached(chunk.tokens, shared, starts, last=lens - 1)
        last = logits[:, 0]
        cache = KVCache(jnp.take(shared.k, chunk.source, axis=1),
                        jnp.take(shared.v, chunk.source, axis=1))
        last, starts, lens = last[chunk.source], starts[chunk.source], lens[chunk.source]
    tok, lp = sampler.choose(last, 0)
    hit, sstate = sampler.stopped(tok, jnp.zeros((B, inp.stop_tables.shape[0]), jnp.int32))
    return cache, LoopState(
        step=jnp.int32(1), keys=(), values=(), lengths=starts + lens, token=tok,
        done=hit | ~chunk.active | (inp.max_new <= 1), finished=hit & chunk.active,
        stop_state=sstate,
        tokens=jnp.full((B, config.buffer_len), config.pad_id, jnp.int32).at[:, 0].set(tok),
        logprobs=jnp.zeros((B, config.buffer_len), jnp.float32).at[:, 0].set(lp),
        n_new=jnp.ones((B,), jnp.int32))


def _decode(graphdef, config: LoopConfig, params, cache: KVCache, state: LoopState,
            inp: SamplingInputs):
    """The decode `while_loop`: one token per row per step until every row is done or the
    run-time cap is reached; returns the stacked cache and the final state (outputs in it)."""
    TRACE_COUNT["decode"] += 1
    model = nnx.merge(graphdef, params)
    sampler = _Sampler(config, inp)
    # the loop runs on per-layer weights and caches: see Decoder.forward_layers_cached
    layers = model.layer_arrays()
    state = state.replace(keys=tuple(cache.k), values=tuple(cache.v))
    pad = config.pad_id

    def cond(s: LoopState):
        return (s.step < jnp.minimum(inp.max_new, inp.stop_step)) & ~jnp.all(s.done)

    def body(s: LoopState) -> LoopState:
        logits, ks, vs = model.forward_layers_cached(s.token[:, None], s.keys, s.values,
                                                     s.lengths, layers)
        live = ~s.done
        new, lp = sampler.choose(logits[:, 0], s.step, s.token)
        hit, new_sstate = sampler.stopped(new, s.stop_state)
        n_new = s.n_new + live.astype(jnp.int32)
        return LoopState(
            step=s.step + 1, keys=tuple(ks), values=tuple(vs),
            lengths=s.lengths + live.astype(jnp.int32),
            token=jnp.where(live, new, s.token),
            done=s.done | hit | (n_new >= inp.max_new),
            finished=s.finished | (hit & live),
            stop_state=jnp.where(live[:, None], new_sstate, s.stop_state),
            tokens=s.tokens.at[:, s.step].set(jnp.where(live, new, pad)),
            logprobs=s.logprobs.at[:, s.step].set(jnp.where(live, lp, 0.0)),
            n_new=n_new)

    s = jax.lax.while_loop(cond, body, state)
    return KVCache(jnp.stack(s.keys), jnp.stack(s.values)), s.replace(keys=(), values=())


_COMPILED: dict[Any, Any] = {}


def programs(graphdef, config: LoopConfig, mesh, params):
    """(prefill, decode) jitted for one model structure, static config and mesh; the cache
    (and the loop state holding it) is donated from one to the next. What `generate` runs,
    and what `jaxtom.plan` compiles on abstract inputs to size a rollout."""
    key = (graphdef, config, mesh)
    if key not in _COMPILED:
        def prefill(params, cache, chunk, inp):  # named: compile logs and profiles say which
            return _prefill(graphdef, config, params, cache, chunk, inp)

        def decode(params, cache, state, inp):
            return _decode(graphdef, config, params, cache, state, inp)

        if mesh is None:
            _COMPILED[key] = (jax.jit(prefill, donate_argnums=(1,)),
                              jax.jit(decode, donate_argnums=(1, 2)))
        else:
            cache = cache_sharding(mesh)
            params_sh = jax.tree.map(lambda x: x.sharding, params)
            state = state_sharding(mesh)
            chunk, inputs = input_shardings(mesh)
            _COMPILED[key] = (
                jax.jit(prefill, donate_argnums=(1,),
                        in_shardings=(params_sh, KVCache(cache, cache), chunk, inputs),
                        out_shardings=(KVCache(cache, cache), state)),
                jax.jit(decode, donate_argnums=(1, 2),
                        in_shardings=(params_sh, KVCache(cache, cache), state, inputs),
                        out_shardings=(KVCache(cache, cache), state)))
    return _COMPILED[key]


def input_shardings(mesh: Mesh) -> tuple[PromptChunk, SamplingInputs]:
    """Where the host-built prompt chunk and sampling inputs go: rows over the batch axes,
    scalars and tables replicated."""
    rep = NamedSharding(mesh, PartitionSpec())
    row = NamedSharding(mesh, PartitionSpec(parallel.BATCH_AXES))
    mat = NamedSharding(mesh, PartitionSpec(parallel.BATCH_AXES, None))
    return (PromptChunk(tokens=mat, chunk_lens=row, starts=row, active=row, source=row),
            SamplingInputs(row_ids=row, key=rep, max_new=rep, temperature=rep, top_k=rep,
                           top_p=rep, stop_ids=rep, stop_tables=rep, explore_after=rep,
                           explore_temperature=rep, explore_tokens=rep, stop_step=rep))


def state_sharding(mesh: Mesh) -> LoopState:
    """Where the decode loop's state lives: rows over the batch axes, the step replicated."""
    rep = NamedSharding(mesh, PartitionSpec())
    row = NamedSharding(mesh, PartitionSpec(parallel.BATCH_AXES))
    mat = NamedSharding(mesh, PartitionSpec(parallel.BATCH_AXES, None))
    return LoopState(step=rep, keys=(), values=(), lengths=row, token=row, done=row,
                     finished=row, stop_state=mat, tokens=mat, logprobs=mat, n_new=row)


def cache_sharding(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, parallel.logical_to_spec(CACHE_AXES))
