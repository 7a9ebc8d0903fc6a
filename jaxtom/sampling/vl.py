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
from jax.sharding import NamedSharding, PartitionSpec

from jaxtom import parallel

from jaxtom.sampling import sampler
from jaxtom.models.qwen3_vl import Qwen3VL, prepare_batch

_PREFILL: dict[Any, Any] = {}
# traces of the VL prefill program (tests check that bucketed inputs bound recompilation)
TRACE_COUNT = {"prefill": 0}


def image_buckets(images: Sequence[Sequence], cfg) -> tuple[int | None, int | None]:
    """(patches per image, images) padded to geometric buckets (`sampler.bucket`), so that
    prompts with varied image sizes and counts share a few compiled prefill programs."""
    from jaxtom.models.image_processing import smart_resize

    sizes, count = [], 0
    for row in images:
        for im in row:
            count += 1
            if isinstance(im, tuple):  # preprocessed (patches, grid)
                sizes.append(int(np.prod(im[1])))
                continue
            h, w = np.shape(im)[:2] if hasattr(im, "shape") else im.size[::-1]  # array / PIL
            v = cfg.vision
            rh, rw = smart_resize(h, w, v.patch_size * v.spatial_merge_size)
            sizes.append(rh * rw // v.patch_size ** 2)
    if not count:
        return None, None
    return (sampler.bucket(max(sizes), 64, cfg.vision.merge_unit), sampler.bucket(count, 1))


def _prefill_fn(graphdef, mesh):
    if (graphdef, mesh) not in _PREFILL:
        def prefill(state, ids, positions, image_index, vision, cache, starts):
            TRACE_COUNT["prefill"] += 1
            model = nnx.merge(graphdef, state)
            _, cache = model.forward_cached(ids, positions, image_index, vision, cache, starts)
            return cache
        _PREFILL[graphdef, mesh] = jax.jit(prefill, donate_argnums=(5,))
    return _PREFILL[graphdef, mesh]


def prefill_cache(model: Qwen3VL, prompts: Sequence[Sequence[int]], images: Sequence = (), *,
                  buffer_len: int, max_cache_len: int | None = None, pad_id: int = 0,
                  preprocessed: bool = False, num_patches: int | None = None
                  ) -> tuple[sampler.ResumeState, list[list[int]]]:
    """Caches every prompt token but the last (images included); returns the resume state
    and each row's remaining last token, for `sampler.generate(model.language_model, ...)`.
    """
    cfg = model.config
    lm = model.language_model
    auto_patches, auto_images = image_buckets(images, cfg)
    batch = prepare_batch(cfg, prompts, images, pad_id=pad_id, preprocessed=preprocessed,
                          num_patches=num_patches or auto_patches, num_images=auto_images)
    n = len(prompts)
    lengths = batch.lengths
    if np.any(lengths < 1):
        raise ValueError("every prompt must contain at least one token")
    last = batch.input_ids[np.arange(n), lengths - 1]
    if np.any(last == cfg.image_token_id):
        raise ValueError("a prompt may not end with an image token; end it with text (e.g. "
                         "the chat template's assistant header)")
    starts = (lengths - 1).astype(np.int32)
    B, S = sampler.call_shape(lm, starts, [1] * n, buffer_len, max_cache_len)
    T = min(sampler.bucket(int(lengths.max()), 8), S)
    # positions shifted by -delta so that each row continues at its slot index
    positions = batch.positions - batch.rope_deltas[None, :, None]
    ids = np.full((B, T), pad_id, np.int32)
    pos = np.broadcast_to(np.arange(T, dtype=np.int32), (3, B, T)).copy()
    index = np.full((B, T), -1, np.int32)
    width = min(T, batch.input_ids.shape[1])
    ids[:n, :width] = batch.input_ids[:, :width]
    pos[:, :n, :width] = positions[:, :, :width]
    index[:n, :width] = batch.image_index[:, :width]
    mesh = sampler.model_mesh(lm)
    cache = sampler.zeros_cache(lm.config, B, S, mesh)
    inputs = (ids, pos, index, batch.vision, np.zeros(B, np.int32))
    if mesh is not None:
        # placed explicitly (several processes accept no host arrays): rows over the batch
        # axes, images replicated
        rows = NamedSharding(mesh, PartitionSpec(parallel.BATCH_AXES))
        mat = NamedSharding(mesh, PartitionSpec(parallel.BATCH_AXES, None))
        rep = NamedSharding(mesh, PartitionSpec())
        pos3 = NamedSharding(mesh, PartitionSpec(None, parallel.BATCH_AXES, None))
        vision = None if batch.vision is None else jax.tree.map(lambda _: rep, batch.vision)
        inputs = jax.device_put(inputs, (mat, pos3, mat, vision, rows))
    graphdef, state = nnx.split(model)
    ids, pos, index, vision, starts0 = inputs
    cache = _prefill_fn(graphdef, mesh)(state, ids, pos, index, vision, cache, starts0)
    return sampler.ResumeState(cache, starts), [[int(t)] for t in last]


def generate(model: Qwen3VL, prompts: Sequence[Sequence[int]], images: Sequence = (), *,
             max_new_tokens: int, buffer_len: int | None = None,
             max_cache_len: int | None = None, pad_id: int = 0, preprocessed: bool = False,
             num_patches: int | None = None, **sampling_kwargs) -> sampler.GenerationResult:
    """`sampler.generate` for image+text prompts: `prompts[b]` (token ids with one
    `<|image_pad|>` per image) and `images[b]` (PIL images or uint8 [H, W, 3] arrays).
    Other keywords (temperature, top_p, top_k, stop, key, tokenizer, row_ids) are the
    sampler's."""
    if buffer_len is None:
        buffer_len = sampler.bucket(max_new_tokens, 16)
    resume, last = prefill_cache(model, prompts, images, buffer_len=buffer_len,
                                 max_cache_len=max_cache_len, pad_id=pad_id,
                                 preprocessed=preprocessed, num_patches=num_patches)
    return sampler.generate(model.language_model, last, max_new_tokens=max_new_tokens,
                             resume=resume, buffer_len=buffer_len, max_cache_len=max_cache_len,
                             pad_id=pad_id, **sampling_kwargs)
