"""Generation from Qwen3-VL: a jitted image+text prefill, then `jaxtom.sampling` as is.

The prefill runs the vision tower and writes every prompt token but the last into a KV cache
whose keys sit at M-RoPE positions shifted by each row's rope delta (RoPE scores depend only
on position differences, so the shift changes nothing), which makes the cached sequence
continue at its slot index. The text sampler then resumes from that cache with each row's
last prompt token, exactly as it resumes a text conversation.
"""

from __future__ import annotations

from typing import Any, Sequence

import jax
import numpy as np
from flax import nnx

from jaxtom import sampling
from jaxtom.models.decoder import KVCache
from jaxtom.models.qwen3_vl import Qwen3VL, prepare_batch

_PREFILL: dict[Any, Any] = {}


def _prefill_fn(graphdef):
    if graphdef not in _PREFILL:
        def prefill(state, ids, positions, image_index, vision, cache, starts):
            model = nnx.merge(graphdef, state)
            _, cache = model.forward_cached(ids, positions, image_index, vision, cache, starts)
            return cache
        _PREFILL[graphdef] = jax.jit(prefill, donate_argnums=(5,))
    return _PREFILL[graphdef]


def prefill_cache(model: Qwen3VL, prompts: Sequence[Sequence[int]], images: Sequence = (), *,
                  buffer_len: int, max_cache_len: int | None = None, pad_id: int = 0,
                  preprocessed: bool = False, num_patches: int | None = None
                  ) -> tuple[sampling.ResumeState, list[list[int]]]:
    """Caches every prompt token but the last (images included); returns the resume state
    and each row's remaining last token, for `sampling.generate(model.language_model, ...)`.
    """
    cfg = model.config
    lm = model.language_model
    batch = prepare_batch(cfg, prompts, images, pad_id=pad_id, preprocessed=preprocessed,
                          num_patches=num_patches)
    n = len(prompts)
    lengths = batch.lengths
    if np.any(lengths < 1):
        raise ValueError("every prompt must contain at least one token")
    last = batch.input_ids[np.arange(n), lengths - 1]
    if np.any(last == cfg.image_token_id):
        raise ValueError("a prompt may not end with an image token; end it with text (e.g. "
                         "the chat template's assistant header)")
    starts = (lengths - 1).astype(np.int32)
    B, S = sampling.call_shape(lm, starts, [1] * n, buffer_len, max_cache_len)
    T = min(sampling.bucket(int(lengths.max()), 8), S)
    # positions shifted by -delta so that each row continues at its slot index
    positions = batch.positions - batch.rope_deltas[None, :, None]
    ids = np.full((B, T), pad_id, np.int32)
    pos = np.broadcast_to(np.arange(T, dtype=np.int32), (3, B, T)).copy()
    index = np.full((B, T), -1, np.int32)
    width = min(T, batch.input_ids.shape[1])
    ids[:n, :width] = batch.input_ids[:, :width]
    pos[:, :n, :width] = positions[:, :, :width]
    index[:n, :width] = batch.image_index[:, :width]
    cache = KVCache.zeros(lm.config, B, S)
    mesh = sampling.model_mesh(lm)
    if mesh is not None:
        cache = jax.device_put(cache, KVCache(sampling.cache_sharding(mesh),
                                              sampling.cache_sharding(mesh)))
    graphdef, state = nnx.split(model)
    cache = _prefill_fn(graphdef)(state, ids, pos, index, batch.vision, cache,
                                  np.zeros(B, np.int32))
    return sampling.ResumeState(cache, starts), [[int(t)] for t in last]


def generate(model: Qwen3VL, prompts: Sequence[Sequence[int]], images: Sequence = (), *,
             max_new_tokens: int, buffer_len: int | None = None,
             max_cache_len: int | None = None, pad_id: int = 0, preprocessed: bool = False,
             num_patches: int | None = None, **sampling_kwargs) -> sampling.GenerationResult:
    """`sampling.generate` for image+text prompts: `prompts[b]` (token ids with one
    `<|image_pad|>` per image) and `images[b]` (PIL images or uint8 [H, W, 3] arrays).
    Other keywords (temperature, top_p, top_k, stop, key, tokenizer, row_ids) are the
    sampler's."""
    if buffer_len is None:
        buffer_len = sampling.bucket(max_new_tokens, 16)
    resume, last = prefill_cache(model, prompts, images, buffer_len=buffer_len,
                                 max_cache_len=max_cache_len, pad_id=pad_id,
                                 preprocessed=preprocessed, num_patches=num_patches)
    return sampling.generate(model.language_model, last, max_new_tokens=max_new_tokens,
                             resume=resume, buffer_len=buffer_len, max_cache_len=max_cache_len,
                             pad_id=pad_id, **sampling_kwargs)
