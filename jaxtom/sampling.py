"""Batched generation with a KV cache: a jitted prefill, then a jitted `lax.while_loop` decode.

Every row keeps its own cache length, so prompts of different lengths need no left padding
and RoPE positions stay exact. The cache is donated into the jitted calls and handed back in
`GenerationResult.state`; passing that state to the next `generate` call appends new tokens
after what is already cached, costing only the new tokens' prefill. A caller that keeps
caches itself (the CToM controller, per conversation) resumes with `pending=None` from any
prefix of what a row holds, in a cache of the shape `call_shape` gives.

Compilation is bounded. The batch, the prompt chunk, the output buffer and the cache are
padded to geometric buckets (`bucket`), and `max_new_tokens` is a run-time value inside the
buffer; only the settings in `LoopConfig` are static. The prefill and the decode loop are
separate programs, so the decode loop (the slow one to compile: its layers are unrolled)
depends on the prompt length only through the cache-size bucket: a training run compiles
one cheap prefill per prompt-length bucket and a few decode loops, and phases whose caps
fall in one bucket (or that pass one `buffer_len`) share them. The loop ends as soon as
every row has stopped.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx, struct
from jax.sharding import Mesh, NamedSharding, PartitionSpec

from jaxtom import parallel
from jaxtom.models.decoder import CACHE_AXES, CACHE_SEQ_AXIS, Decoder, KVCache
from jaxtom.stop_strings import MATCHED, find_stop, stop_tables


@dataclasses.dataclass
class ResumeState:
    """What a later `generate` call needs to continue each row; usable once (cache donated).

    `pending=None` resumes from a kept cache: each row's prompt is written from slot
    `lengths[i]` on, so a caller may rewind a row to any prefix of what it holds (slots past
    a row's length are overwritten, never attended to).
    """
    cache: KVCache
    lengths: np.ndarray  # valid cache slots per row
    pending: np.ndarray | None = None  # last generated token per row, not yet in the cache


class GenerationResult(NamedTuple):
    tokens: np.ndarray  # [batch, max_new_tokens] int32, pad_id after each row's length
    logprobs: np.ndarray  # [batch, max_new_tokens] float32 log p(token) at temperature 1
    lengths: np.ndarray  # [batch] new tokens per row, stop token included
    finished: np.ndarray  # [batch] bool: a stop id or string ended the row
    texts: list[str] | None  # decoded new text (cut after the stop string) if a tokenizer
    state: ResumeState
    steps: int = 0  # loop iterations run, first token included: max(lengths), so below
    # max_new_tokens when every row stopped early (the loop exits then)

    def sequences(self) -> list[list[int]]:
        return [row[:n].tolist() for row, n in zip(self.tokens, self.lengths)]


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
    stop_tables: jax.Array  # [n_strings, depth, vocab] int16 (see jaxtom.stop_strings)
    explore_after: jax.Array  # [m] int32, -1 padded: the token after one of these is drawn
    explore_temperature: jax.Array  # at this temperature instead (see `generate`),
    explore_tokens: jax.Array  # [k] int32, -1 padded: from these ids only (all if none)


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
        return (s.step < inp.max_new) & ~jnp.all(s.done)

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
            rep = NamedSharding(mesh, PartitionSpec())
            row = NamedSharding(mesh, PartitionSpec(parallel.BATCH_AXES))
            mat = NamedSharding(mesh, PartitionSpec(parallel.BATCH_AXES, None))
            cache = cache_sharding(mesh)
            params_sh = jax.tree.map(lambda x: x.sharding, params)
            state = LoopState(step=rep, keys=(), values=(),
                              lengths=row, token=row, done=row, finished=row, stop_state=mat,
                              tokens=mat, logprobs=mat, n_new=row)
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
                           explore_temperature=rep, explore_tokens=rep))


def cache_sharding(mesh: Mesh) -> NamedSharding:
    return NamedSharding(mesh, parallel.logical_to_spec(CACHE_AXES))


def zeros_cache(cfg, batch: int, slots: int, mesh: Mesh | None) -> KVCache:
    """An empty cache of `batch` rows x `slots`, created in its sharded place on `mesh`
    (never whole on one device first)."""
    if mesh is None:
        return KVCache.zeros(cfg, batch, slots)
    shapes = jax.eval_shape(lambda: KVCache.zeros(cfg, batch, slots))
    sharding = cache_sharding(mesh)
    return parallel.sharded_zeros(shapes, KVCache(sharding, sharding))


def model_mesh(model: Decoder) -> Mesh | None:
    """The mesh the model's parameters live on, if they are NamedSharding-placed."""
    sharding = getattr(model.embed_tokens[...], "sharding", None)
    return sharding.mesh if isinstance(sharding, NamedSharding) else None


def bucket(n: int, minimum: int, multiple: int = 1) -> int:
    """The smallest size >= n in minimum, then steps of a quarter of the current power of two
    (8, 10, 12, 14, 16, 20, 24, ... for minimum 8), rounded up to `multiple`.

    Padding wastes at most ~25%, and sizes up to N fall into O(log N) buckets, so the
    number of compiled programs grows with the log of the range of lengths seen.
    """
    size = max(int(minimum), 1)
    while size < n:
        size += max(1, (1 << (size.bit_length() - 1)) // 4)
    return -(-size // multiple) * multiple


def call_shape(model: Decoder, starts: Sequence[int], chunk_lens: Sequence[int],
               buffer_len: int, max_cache_len: int | None = None) -> tuple[int, int]:
    """(batch rows, cache slots) of a `generate` call whose rows write `chunk_lens[i]` tokens
    from slot `starts[i]` on: a caller that keeps caches hands over one of exactly this
    shape, which the call then uses as is."""
    cfg = model.config
    mesh = model_mesh(model)
    multiple = 1 if mesh is None else mesh.shape["data"] * mesh.shape["fsdp"]
    limit = min(max_cache_len or cfg.max_position_embeddings, cfg.max_position_embeddings)
    # slots: prefill writes T at starts, decode at most buffer_len more; never more than the
    # (bucketed) position limit, which every request fits by generate's length check
    floor = int(max(starts)) + bucket(max(chunk_lens), 8)
    return (bucket(len(starts), 1, multiple),
            max(floor, min(bucket(floor + buffer_len, 64), bucket(limit, 64))))


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
             row_ids: Sequence[int] | np.ndarray | None = None,
             buffer_len: int | None = None, explore_after: Sequence[int] = (),
             explore_temperature: float = 1.0,
             explore_tokens: Sequence[int] = (),
             share_prefill: bool = True) -> GenerationResult:
    """Generates up to `max_new_tokens` per prompt; temperature <= 0 means greedy.

    `prompts` are token-id lists (or strings with `tokenizer=`); with `resume=` they are the
    tokens to append to each row's cached sequence before generating again.

    Row i samples with `fold_in(fold_in(key, row_ids[i]), step)` (`row_ids` defaults to
    0..B-1), so its tokens depend only on its prompt, the key and its id: a process that
    samples `prompts[a:b]` with `row_ids=range(a, b)` gets the rows a single process
    sampling all prompts would. Resuming restarts the step count: pass a fresh key.

    On a model sharded over a mesh that spans several processes the call is a collective
    (SPMD over the whole mesh, weights used where they live): every process passes the
    same arguments and gets the whole result (`rl.distributed.generate_rows` gathers each
    process's prompts first).

    `max_new_tokens` is a run-time value; the compiled loop's output buffer has
    `buffer_len` columns (default: `max_new_tokens` rounded up by `bucket`, at least 16).
    Pass the largest cap of a run as `buffer_len` to have every phase share one decode
    program.

    `explore_after`: token ids after which the next token is drawn at `explore_temperature`
    instead of `temperature`, and only from `explore_tokens` when given (exploration at a
    chosen decision point, e.g. a probability's digit after "0.", drawn among the digits);
    values only, so it never recompiles. Greedy decoding ignores it. The returned log-probs
    stay those of the model at temperature 1.

    `share_prefill`: rows whose prompts are equal (a GRPO group's samples) are prefilled
    once and start from copies of that cache (not on resume, where caches differ per row).
    """
    cfg = model.config
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if buffer_len is None:
        # geometric, not powers of two: every decode step attends over all cache slots,
        # and slots beyond the cap would cost up to 2x attention time for nothing
        buffer_len = bucket(max_new_tokens, 16)
    elif buffer_len < max_new_tokens:
        raise ValueError(f"buffer_len={buffer_len} is smaller than max_new_tokens="
                         f"{max_new_tokens}")
    if not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")
    if top_k < 0:
        raise ValueError(f"top_k must be >= 0 (0 disables it), got {top_k}")
    explore_ids = [int(i) for i in explore_after]
    explore_choices = [int(i) for i in explore_tokens]
    for name, ids in (("explore_after", explore_ids), ("explore_tokens", explore_choices)):
        if any(i < 0 or i >= cfg.vocab_size for i in ids):
            raise ValueError(f"{name} ids must lie in [0, {cfg.vocab_size}), got {ids}")
    if explore_ids and not explore_temperature > 0:
        raise ValueError(f"explore_temperature must be > 0, got {explore_temperature}")
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
        if resume.pending is not None:
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
    starts = np.zeros(n_real, np.int32) if resume is None else np.asarray(resume.lengths,
                                                                          np.int32)
    limit = min(max_cache_len or cfg.max_position_embeddings, cfg.max_position_embeddings)
    longest = int(max(s + len(r) for s, r in zip(starts, rows))) + max_new_tokens
    if longest > limit:
        raise ValueError(f"prompt of {longest - max_new_tokens} tokens plus max_new_tokens="
                         f"{max_new_tokens} exceeds the cache length {limit}")
    # rows are independent (own keys, own cache lengths), so padding the batch is exact
    B, S = call_shape(model, starts, [len(r) for r in rows], buffer_len, max_cache_len)
    if resume is not None:
        B = max(B, resume.cache.k.shape[1])
    rows = rows + [[pad_id]] * (B - n_real)
    starts = np.concatenate([starts, np.zeros(B - n_real, np.int32)])
    T = bucket(max(map(len, rows)), 8)
    floor = int(starts.max()) + T
    if (resume is not None and resume.cache.k.shape[1] == B
            and resume.cache.k.shape[CACHE_SEQ_AXIS] >= floor + max_new_tokens):
        cache = resume.cache
    elif resume is None:
        cache = zeros_cache(cfg, B, S, mesh)
    else:
        cache = _grow(resume.cache, B, S)
    source = np.arange(B, dtype=np.int32)
    chunk_rows, chunk_starts = rows, starts
    if share_prefill and resume is None:
        first: dict[tuple[int, ...], int] = {}
        source = np.asarray([first.setdefault(tuple(r), len(first)) for r in rows], np.int32)
        unique = list(first)
        # a power of two, and only when it at least halves the prefill: calls whose rows
        # are mostly distinct (an evaluation's, padded with copies of one prompt) then keep
        # the one program of their row count instead of compiling one per distinct count
        multiple = 1 if mesh is None else mesh.shape["data"] * mesh.shape["fsdp"]
        U = -(-(1 << (len(unique) - 1).bit_length()) // multiple) * multiple
        if 2 * U <= B:
            chunk_rows = [list(r) for r in unique] + [[pad_id]] * (U - len(unique))
            chunk_starts = np.zeros(U, np.int32)
        else:
            source = np.arange(B, dtype=np.int32)
    tokens = np.full((len(chunk_rows), T), pad_id, np.int32)
    for i, r in enumerate(chunk_rows):
        tokens[i, :len(r)] = r
    lens = np.asarray([len(r) for r in chunk_rows], np.int32)
    tables = _padded(stop_tables(stop_strs, tokenizer.token_texts())) if stop_strs else (
        np.zeros((0, 1, cfg.vocab_size), np.int16))
    stop_arr = np.full(bucket(max(len(stop_ids), 1), 4), -1, np.int32)
    stop_arr[:len(stop_ids)] = stop_ids
    explore_arr = np.full(bucket(max(len(explore_ids), 1), 4), -1, np.int32)
    explore_arr[:len(explore_ids)] = explore_ids
    choices_arr = np.full(bucket(max(len(explore_choices), 1), 4), -1, np.int32)
    choices_arr[:len(explore_choices)] = explore_choices

    graphdef, params = nnx.split(model)
    greedy = temperature <= 0
    config = LoopConfig(buffer_len=int(buffer_len), greedy=greedy,
                        use_filter=not greedy and (top_k > 0 or top_p < 1.0), pad_id=int(pad_id))
    prefill, decode = programs(graphdef, config, mesh, params)
    if mesh is not None:
        cache = jax.device_put(cache, KVCache(cache_sharding(mesh), cache_sharding(mesh)))
    chunk = PromptChunk(tokens=tokens, chunk_lens=lens, starts=chunk_starts,
                        active=np.arange(B) < n_real, source=source)
    inputs = SamplingInputs(
        row_ids=np.concatenate([ids, np.zeros(B - n_real, np.int64)]).astype(np.uint32),
        key=np.asarray(jax.random.key_data(key)), max_new=np.int32(max_new_tokens), temperature=np.float32(temperature),
        top_k=np.int32(top_k), top_p=np.float32(top_p), stop_ids=stop_arr,
        stop_tables=tables, explore_after=explore_arr,
        explore_temperature=np.float32(explore_temperature), explore_tokens=choices_arr)
    if mesh is not None:
        # placed explicitly: a program over a mesh accepts no host arrays when the mesh
        # spans several processes (each of which passes these same values)
        chunk, inputs = jax.device_put((chunk, inputs), input_shardings(mesh))
    cache, state = prefill(params, cache, chunk, inputs)
    if max_new_tokens > 1:  # else the loop would not run: no decode program to compile
        cache, state = decode(params, cache, state, inputs)
    out_tok, out_lp, n_gen, finished, lengths, pending, steps = (
        parallel.host_value(x) for x in (state.tokens, state.logprobs, state.n_new,
                                         state.finished, state.lengths, state.token,
                                         state.step))
    out_tok = np.asarray(out_tok[:n_real, :max_new_tokens])
    n_gen = np.asarray(n_gen[:n_real])
    texts = None
    if tokenizer is not None:
        texts = []
        for row, n in zip(out_tok, n_gen):
            text = tokenizer.decode(row[:n].tolist())
            end = find_stop(text, stop_strs)
            texts.append(text if end is None else text[:end])
    new_state = ResumeState(cache, np.asarray(lengths[:n_real]), np.asarray(pending[:n_real]))
    return GenerationResult(out_tok, np.asarray(out_lp[:n_real, :max_new_tokens]), n_gen,
                            np.asarray(finished[:n_real]), texts, new_state, int(steps))


def _padded(tables: np.ndarray) -> np.ndarray:
    """Stop tables padded to bucketed string counts and depths, so that calls with
    different stop strings (the CToM phases' closing tags) share compiled programs. Added
    automata are all zeros and added states unreachable: neither ever matches."""
    n, depth, vocab = tables.shape
    out = np.zeros((bucket(n, 1), bucket(depth, 16), vocab), np.int16)
    out[:n, :depth] = tables
    return out


def _grow(cache: KVCache, batch: int, length: int) -> KVCache:
    """Pads a resumed cache to more slots (and padded batch rows) when it is too short."""
    pad = [(0, 0)] * cache.k.ndim
    pad[1] = (0, batch - cache.k.shape[1])
    pad[CACHE_SEQ_AXIS] = (0, length - cache.k.shape[CACHE_SEQ_AXIS])
    return KVCache(jnp.pad(cache.k, pad), jnp.pad(cache.v, pad))
