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
fall in one bucket (or that pass one `buffer_len`) share them; calls that pass one
`min_prompt_len` share one prefill and cache size too. A compacting call (`compact=True`,
`jaxtom.sampling.segments`) decodes on fixed row and slot ladders. The loop ends as soon as
every row has stopped.
"""

from __future__ import annotations

import dataclasses
from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from jax.sharding import Mesh, NamedSharding

from jaxtom import parallel
from jaxtom.buckets import bucket
from jaxtom.models.decoder import CACHE_SEQ_AXIS, Decoder, KVCache
from jaxtom.sampling import loop, segments
from jaxtom.sampling.stop_strings import find_stop, stop_tables


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
    state: ResumeState | None  # None after `generate(compact=True)`
    steps: int = 0  # loop iterations run, first token included: max(lengths), so below
    # max_new_tokens when every row stopped early (the loop exits then)

    def sequences(self) -> list[list[int]]:
        return [row[:n].tolist() for row, n in zip(self.tokens, self.lengths)]


def zeros_cache(cfg, batch: int, slots: int, mesh: Mesh | None) -> KVCache:
    """An empty cache of `batch` rows x `slots`, created in its sharded place on `mesh`
    (never whole on one device first)."""
    if mesh is None:
        return KVCache.zeros(cfg, batch, slots)
    shapes = jax.eval_shape(lambda: KVCache.zeros(cfg, batch, slots))
    sharding = loop.cache_sharding(mesh)
    return parallel.sharded_zeros(shapes, KVCache(sharding, sharding))


def model_mesh(model: Decoder) -> Mesh | None:
    """The mesh the model's parameters live on, if they are NamedSharding-placed."""
    sharding = getattr(model.embed_tokens[...], "sharding", None)
    return sharding.mesh if isinstance(sharding, NamedSharding) else None


def call_shape(model: Decoder, starts: Sequence[int], chunk_lens: Sequence[int],
               buffer_len: int, max_cache_len: int | None = None,
               min_prompt_len: int = 0) -> tuple[int, int]:
    """(batch rows, cache slots) of a `generate` call whose rows write `chunk_lens[i]` tokens
    from slot `starts[i]` on: a caller that keeps caches hands over one of exactly this
    shape, which the call then uses as is. `min_prompt_len`: the call's own."""
    cfg = model.config
    mesh = model_mesh(model)
    multiple = 1 if mesh is None else mesh.shape["data"] * mesh.shape["fsdp"]
    limit = min(max_cache_len or cfg.max_position_embeddings, cfg.max_position_embeddings)
    # slots: prefill writes T at starts, decode at most buffer_len more; never more than the
    # (bucketed) position limit, which every request fits by generate's length check
    floor = int(max(starts)) + bucket(max(max(chunk_lens), min_prompt_len), 8)
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
             share_prefill: bool = True, compact: bool = False,
             min_prompt_len: int = 0) -> GenerationResult:
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

    `compact`: decode in segments that drop finished rows and attend over the slots in use
    (`jaxtom.sampling.segments`): a ragged batch then costs about its rows' own lengths, not
    its longest row's in every row. The same tokens; the result's `state` is None, since the
    cache no longer holds every row (resuming callers keep the default).

    `min_prompt_len`: pad the prompts to at least this many tokens (then bucketed). A run
    that passes its prompt budget (`row_len - max_new_tokens`, what `jaxtom.plan` sizes)
    gives every call one prompt chunk and one cache size, however its prompts' lengths vary
    from step to step: one prefill and one set of decode programs instead of one per prompt
    bucket met, for a longer prefill. Not with `resume`, whose chunk continues a cache.
    """
    cfg = model.config
    if max_new_tokens < 1:
        raise ValueError(f"max_new_tokens must be >= 1, got {max_new_tokens}")
    if min_prompt_len and resume is not None:
        raise ValueError(f"min_prompt_len={min_prompt_len} pads a fresh call's prompts; a "
                         "resumed call's chunk continues its cache: pass 0 with resume=")
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
    B, S = call_shape(model, starts, [len(r) for r in rows], buffer_len, max_cache_len,
                      min_prompt_len)
    if resume is not None:
        B = max(B, resume.cache.k.shape[1])
    rows = rows + [[pad_id]] * (B - n_real)
    starts = np.concatenate([starts, np.zeros(B - n_real, np.int32)])
    T = bucket(max(max(map(len, rows)), min_prompt_len), 8)
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
    config = loop.LoopConfig(buffer_len=int(buffer_len), greedy=greedy,
                        use_filter=not greedy and (top_k > 0 or top_p < 1.0), pad_id=int(pad_id))
    prefill, decode = loop.programs(graphdef, config, mesh, params)
    if mesh is not None:
        cache = jax.device_put(cache, KVCache(loop.cache_sharding(mesh), loop.cache_sharding(mesh)))
    chunk = loop.PromptChunk(tokens=tokens, chunk_lens=lens, starts=chunk_starts,
                        active=np.arange(B) < n_real, source=source)
    inputs = loop.SamplingInputs(
        row_ids=np.concatenate([ids, np.zeros(B - n_real, np.int64)]).astype(np.uint32),
        key=np.asarray(jax.random.key_data(key)), max_new=np.int32(max_new_tokens), temperature=np.float32(temperature),
        top_k=np.int32(top_k), top_p=np.float32(top_p), stop_ids=stop_arr,
        stop_tables=tables, explore_after=explore_arr,
        explore_temperature=np.float32(explore_temperature), explore_tokens=choices_arr,
        stop_step=np.int32(max_new_tokens))
    if mesh is not None:
        # placed explicitly: a program over a mesh accepts no host arrays when the mesh
        # spans several processes (each of which passes these same values)
        chunk, inputs = jax.device_put((chunk, inputs), loop.input_shardings(mesh))
    cache, state = prefill(params, cache, chunk, inputs)
    if compact and max_new_tokens > 1:
        multiple = 1 if mesh is None else mesh.shape["data"] * mesh.shape["fsdp"]
        out = segments.decode_segments(decode, params, cache, state, inputs, n_real=n_real,
                                       max_new=max_new_tokens, multiple=multiple, mesh=mesh)
        out_tok, out_lp, n_gen, finished, lengths, pending, steps = (
            out[k] for k in ("tokens", "logprobs", "n_new", "finished", "lengths", "token",
                             "steps"))
        cache = None
    else:
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
    new_state = None if cache is None else ResumeState(
        cache, np.asarray(lengths[:n_real]), np.asarray(pending[:n_real]))
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
