"""Qwen3-VL text positions: image placeholders, 3-axis position ids and interleaved M-RoPE.

Positions are computed on the host per sample (as transformers' `get_rope_index` does): text
tokens advance all three axes (T, H, W) together; an image's tokens share the temporal
position of the image's start and spread over a (rows x cols) grid of merged patches; the
next text token starts after the image's larger side. A sequence's `rope delta` (last
position + 1 - length) is what a decoder adds to cache slots to continue it.

Interleaved M-RoPE: rotary frequency j rotates by the H position when j % 3 == 1, by the W
position when j % 3 == 2 (within 3 x the section sizes), and by the T position otherwise.
When the three axes agree (all text) it is the ordinary 1-D RoPE.
"""

from __future__ import annotations

from typing import Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxtom.models.vl_config import VLConfig


def expand_image_tokens(ids: Sequence[int], grids: Sequence[Sequence[int]], cfg: VLConfig
                        ) -> list[int]:
    """Replaces each single `<|image_pad|>` with as many as its image has LLM tokens.

    Raises if the number of placeholders differs from the number of images.
    """
    ids = [int(t) for t in ids]
    slots = [i for i, t in enumerate(ids) if t == cfg.image_token_id]
    if len(slots) != len(grids):
        raise ValueError(f"the prompt has {len(slots)} image placeholders "
                         f"(<|image_pad|>, id {cfg.image_token_id}) but {len(grids)} images "
                         "were given")
    out: list[int] = []
    prev = 0
    for slot, grid in zip(slots, grids):
        out += ids[prev:slot] + [cfg.image_token_id] * (int(np.prod(grid))
                                                        // cfg.vision.merge_unit)
        prev = slot + 1
    return out + ids[prev:]


def image_spans(ids: Sequence[int], cfg: VLConfig) -> list[tuple[int, int]]:
    """(start, end) of each run of image tokens."""
    is_img = np.asarray(ids) == cfg.image_token_id
    edges = np.flatnonzero(np.diff(np.concatenate([[0], is_img.astype(np.int8), [0]])))
    return list(zip(edges[::2].tolist(), edges[1::2].tolist()))


def rope_index(ids: Sequence[int], grids: Sequence[Sequence[int]], cfg: VLConfig
               ) -> tuple[np.ndarray, int]:
    """(positions [3, len(ids)] int32, rope delta) of one expanded sequence.

    `grids` are the (t, h, w) patch grids of the sequence's images in order; each image's
    run of tokens must have exactly t*h*w/4 tokens.
    """
    spans = image_spans(ids, cfg)
    if len(spans) != len(grids):
        raise ValueError(f"the sequence has {len(spans)} runs of image tokens but "
                         f"{len(grids)} images were given")
    m = cfg.vision.spatial_merge_size
    parts, pos, prev = [], 0, 0
    for (start, end), grid in zip(spans, grids):
        t, h, w = (int(grid[0]), int(grid[1]) // m, int(grid[2]) // m)
        if end - start != t * h * w:
            raise ValueError(f"an image with grid {tuple(grid)} needs {t * h * w} tokens, the "
                             f"sequence has {end - start} at {start}")
        n_text = start - prev
        parts.append(np.broadcast_to(np.arange(n_text) + pos, (3, n_text)))
        pos += n_text
        tt, hh, ww = np.meshgrid(np.arange(t), np.arange(h), np.arange(w), indexing="ij")
        parts.append(np.stack([tt, hh, ww]).reshape(3, -1) + pos)
        pos += max(h, w)
        prev = end
    n_text = len(ids) - prev
    parts.append(np.broadcast_to(np.arange(n_text) + pos, (3, n_text)))
    positions = np.concatenate(parts, axis=1).astype(np.int32)
    delta = int(positions.max()) + 1 - len(ids) if len(ids) else 0
    return positions, delta


def mrope_axes(cfg: VLConfig) -> np.ndarray:
    """Which position axis (0 = T, 1 = H, 2 = W) rotates each of the head_dim/2 frequencies."""
    half = cfg.text.head_dim // 2
    axes = np.zeros(half, np.int32)
    for axis in (1, 2):
        axes[axis:min(3 * cfg.mrope_section[axis], half):3] = axis
    return axes


def mrope_cos_sin(positions: jax.Array, inv_freq: np.ndarray, cfg: VLConfig
                  ) -> tuple[jax.Array, jax.Array]:
    """cos, sin [B, T, head_dim/2] of interleaved M-RoPE from positions [3, B, T]."""
    chosen = jnp.take(jnp.asarray(positions), jnp.asarray(mrope_axes(cfg)), axis=0)  # [hd/2,B,T]
    angles = jnp.moveaxis(chosen, 0, -1).astype(jnp.float32) * jnp.asarray(inv_freq)
    return jnp.cos(angles), jnp.sin(angles)
