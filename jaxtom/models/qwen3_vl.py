"""Qwen3-VL in Flax NNX: the vision tower feeding the Qwen3 text decoder.

The text side is jaxtom's `Decoder` (its parameters, `layer_forward`, head and KV cache) with
two overrides, in the spirit of a model family as a small patch: the rotary angles come from
3-axis positions (interleaved M-RoPE, `mrope`), and DeepStack features are added to the hidden
states at image positions after the first decoder layers. Image tokens' input embeddings are
the merged vision tokens, gathered through a host-built `image_index` (the flat vision token
each position takes, or -1), so every shape is static under jit.

Generation reuses `jaxtom.sampling` unchanged: a VL prefill writes the prompt (all but its last
token) into a KV cache, and the sampler resumes from it. RoPE scores depend only on position
differences, so the prompt's keys are written at positions shifted by the sequence's rope
delta; the cached sequence then continues at its slot index, which is where the text-only
sampler puts the next token.
"""

from __future__ import annotations

import hashlib
from typing import NamedTuple, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxtom import parallel
from jaxtom.models.decoder import (
    HIDDEN_AXES,
    LOGITS_AXES,
    UNROLL_MAX_LAYERS,
    Decoder,
    KVCache,
    _write_rows,
    constrain,
    layer_forward,
    rms_norm,
    rope_inv_freq,
    token_inputs,
    uses_remat,
)
from jaxtom.models.image_processing import (
    VisionInputs,
    as_rgb_uint8,
    num_image_tokens,
    preprocess_image,
    vision_inputs,
)
from jaxtom.models.mrope import expand_image_tokens, mrope_cos_sin, rope_index
from jaxtom.models.vision import VisionTower
from jaxtom.models.vl_config import VLConfig


class VLBatch(NamedTuple):
    """Host-built inputs of a batch of image+text sequences (see `prepare_batch`)."""
    input_ids: np.ndarray  # [B, T] int32, padded with pad_id
    positions: np.ndarray  # [3, B, T] int32 M-RoPE positions (T, H, W)
    image_index: np.ndarray  # [B, T] int32 flat vision-token index, -1 for text
    vision: VisionInputs | None  # None when no row has an image
    lengths: np.ndarray  # [B] real tokens per row
    rope_deltas: np.ndarray  # [B] int32: last position + 1 - length


class Qwen3VL(nnx.Module):
    """`model(input_ids, positions, image_index=..., vision=...)` -> logits [B, T, vocab]."""

    def __init__(self, cfg: VLConfig, *, rngs: nnx.Rngs):
        self.config = cfg
        self.visual = VisionTower(cfg.vision, rngs=rngs, param_dtype=cfg.text.param_dtype,
                                  compute_dtype=cfg.text.compute_dtype)
        self.language_model = Decoder(cfg.text, rngs=rngs)

    def embed(self, input_ids, image_index, vision: VisionInputs | None, *,
              remat: bool = False):
        """Input embeddings with image tokens replaced by merged vision tokens, and the
        DeepStack additions [levels, B, T, D] (zero at text positions)."""
        lm = self.language_model
        h = lm._embed(jnp.asarray(input_ids))
        if vision is None:
            return h, None
        tokens, deep = self.visual(vision, remat=remat)
        D = tokens.shape[-1]
        index = jnp.asarray(image_index)
        is_image = (index >= 0)[..., None]
        flat_index = jnp.maximum(index, 0)

        def gather(x):
            return jnp.take(x.reshape(-1, D), flat_index, axis=0).astype(h.dtype)

        h = jnp.where(is_image, gather(tokens), h)
        added = jnp.stack([jnp.where(is_image, gather(d), 0).astype(h.dtype) for d in deep])
        return h, added

    def head_weight(self) -> tuple[jax.Array, int]:
        """The LM head and its vocabulary axis (see `Decoder.head_weight`), for losses that
        apply it to `return_hidden` states themselves."""
        return self.language_model.head_weight()

    @property
    def text_decoder(self) -> Decoder:
        """The language model (where LoRA adapters live)."""
        return self.language_model

    # parameters of the vision tower (`StepConfig.freeze_vision` keeps them as loaded)
    vision_params = nnx.PathContains("visual")

    def row_inputs(self, positions, image_index, vision) -> dict:
        """This forward's keywords from per-row training fields (`rl.vl_batch`: each row
        owns its images): positions [B, 3, T] -> [3, B, T], each row's I images
        [B, I, ...] -> one flat set [B * I, ...], and `image_index` shifted from the row's
        own vision tokens to that set's (-1, text, stays)."""
        B, I, P = vision.patches.shape[:3]
        per_row = I * (P // self.config.vision.merge_unit)
        offset = (jnp.arange(B, dtype=jnp.int32) * per_row)[:, None]
        index = jnp.where(image_index >= 0, image_index + offset, -1)
        flat = jax.tree.map(lambda x: x.reshape(B * I, *x.shape[2:]), vision)
        return {"positions": jnp.moveaxis(positions, 1, 0), "image_index": index,
                "vision": flat}

    def _cos_sin(self, positions):
        return mrope_cos_sin(positions, rope_inv_freq(self.config.text), self.config)

    def __call__(self, input_ids, positions=None, segment_ids=None, *, image_index=None,
                 vision: VisionInputs | None = None, mesh=None, rules: dict | None = None,
                 return_hidden: bool = False) -> jax.Array:
        """Full causal forward (training, scoring): logits [B, T, vocab] (or the final normed
        hidden states with `return_hidden`), called like `Decoder.__call__`.

        `positions` are [3, B, T] M-RoPE positions from `prepare_batch` (`rope_index`), or
        [B, T] text positions (all three axes equal: plain RoPE, so a text-only batch runs
        as it would through a Qwen3 decoder). `image_index` and `vision` (from
        `prepare_batch`) put the images in. Attention is causal in sequence order (and
        within `segment_ids`), as in transformers.
        """
        cfg = self.config.text
        input_ids, positions = token_inputs(input_ids, positions)
        B, T = input_ids.shape
        if positions.shape == (B, T):
            positions = jnp.broadcast_to(positions[None], (3, B, T))
        if positions.shape != (3, B, T):
            raise ValueError(f"positions must be [3, {B}, {T}] (T/H/W axes) or [{B}, {T}], "
                             f"got {positions.shape}")
        if vision is not None and image_index is None:
            raise ValueError("vision inputs need image_index (see prepare_batch)")
        cos, sin = self._cos_sin(positions)
        mask = jnp.broadcast_to(jnp.tril(jnp.ones((T, T), bool)), (B, T, T))
        if segment_ids is not None:
            mask = mask & (segment_ids[:, None, :] == segment_ids[:, :, None])
        lm = self.language_model
        lora_scale = dict(lm.layers.lora_scale)
        h, added = self.embed(input_ids, image_index, vision, remat=uses_remat(cfg))
        h = constrain(h, HIDDEN_AXES, mesh, rules)

        def block(h, p):
            h = layer_forward(p, h, cos, sin, cfg, lora_scale, lambda k, v: (k, v, mask),
                              row_causal=True)
            return constrain(h, HIDDEN_AXES, mesh, rules)

        scanned = cfg.num_layers > UNROLL_MAX_LAYERS
        if uses_remat(cfg):
            block = jax.checkpoint(block, policy=jax.checkpoint_policies.nothing_saveable,
                                   prevent_cse=not scanned)
        n_deep = 0 if added is None else added.shape[0]
        arrays = lm.layers.arrays()
        first = n_deep if scanned else cfg.num_layers
        for i in range(first):
            h = block(h, {k: v[i] for k, v in arrays.items()})
            if i < n_deep:
                h = h + added[i]
        if first < cfg.num_layers:
            rest = {k: v[first:] for k, v in arrays.items()}
            h, _ = jax.lax.scan(lambda h, p: (block(h, p), None), h, rest)
        if return_hidden:
            return constrain(rms_norm(h, lm.norm[...], cfg.rms_norm_eps), HIDDEN_AXES, mesh,
                             rules)
        return constrain(lm._logits(h), LOGITS_AXES, mesh, rules)

    def forward_cached(self, batch_ids, positions, image_index, vision, cache: KVCache,
                       starts) -> tuple[jax.Array, KVCache]:
        """Writes a chunk [B, T] into the cache from slots `starts` with M-RoPE `positions`
        [3, B, T]; returns logits and the cache. Row b's tokens see every slot up to their own
        (slot order, not rope position)."""
        cfg = self.config.text
        lm = self.language_model
        B, T = batch_ids.shape
        S = cache.k.shape[3]
        slots = starts[:, None] + jnp.arange(T)[None, :]
        mask = jnp.arange(S)[None, None, :] <= slots[:, :, None]
        cos, sin = self._cos_sin(positions)
        lora_scale = dict(lm.layers.lora_scale)
        h, added = self.embed(batch_ids, image_index, vision)
        keys, values = [], []
        for i, p in enumerate(lm.layer_arrays()):
            def kv_write(k, v, i=i):
                keys.append(_write_rows(cache.k[i], k, starts))
                values.append(_write_rows(cache.v[i], v, starts))
                return keys[-1].astype(k.dtype), values[-1].astype(v.dtype), mask

            h = layer_forward(p, h, cos, sin, cfg, lora_scale, kv_write, heads_first=True)
            if added is not None and i < added.shape[0]:
                h = h + added[i]
        return lm._logits(h), KVCache(jnp.stack(keys), jnp.stack(values))


def init_qwen3_vl(cfg: VLConfig, seed: int = 0, mesh=None) -> Qwen3VL:
    """A randomly initialised Qwen3-VL, created sharded over `mesh` when given."""
    return parallel.init_sharded(lambda: Qwen3VL(cfg, rngs=nnx.Rngs(seed)), mesh)


def prepare_batch(cfg: VLConfig, prompts: Sequence[Sequence[int]],
                  images: Sequence[Sequence] = (), *, pad_id: int = 0,
                  seq_len: int | None = None, num_patches: int | None = None,
                  num_images: int | None = None, preprocessed: bool = False) -> VLBatch:
    """Host preprocessing of a batch: images -> patches, placeholders expanded, positions.

    `prompts[b]` holds one `<|image_pad|>` per image of `images[b]` (a single pad each, as a
    chat template writes it; runs already expanded to the image's token count are accepted
    too). `images[b]` are PIL images or uint8 [H, W, 3] arrays, or (patches, grid) pairs with
    `preprocessed=True`. `seq_len`/`num_patches`/`num_images` pad to fixed sizes (buckets).

    Identical images (equal pixels; for preprocessed pairs, the same patches array) are
    encoded once and their tokens shared: the rows of a GRPO group, which repeat one prompt,
    cost the vision tower one image, not one per row.
    """
    B = len(prompts)
    images = list(images) or [[] for _ in range(B)]
    if len(images) != B:
        raise ValueError(f"{B} prompts but {len(images)} image lists")
    rows, grids_per_row, slots_per_row, flat = [], [], [], []
    seen: dict[tuple, int] = {}
    for b, (ids, imgs) in enumerate(zip(prompts, images)):
        slots, grids = [], []
        for im in imgs:
            pixels = im[0] if preprocessed else as_rgb_uint8(im)
            # preprocessed pictures are shared as objects (a group's rows hold one picture's
            # patches), so they are keyed by identity: hashing their float32 patches costs
            # more than rendering and preprocessing the pictures
            key = (("object", id(im[0]), tuple(im[1])) if preprocessed else
                   (pixels.shape, hashlib.blake2b(np.ascontiguousarray(pixels).tobytes(),
                                                  digest_size=16).digest()))
            if key not in seen:
                seen[key] = len(flat)
                flat.append(im if preprocessed else preprocess_image(pixels, cfg.vision))
            slots.append(seen[key])
            grids.append(flat[seen[key]][1])
        ids = [int(t) for t in ids]
        n_pad = sum(t == cfg.image_token_id for t in ids)
        expected = sum(num_image_tokens(g, cfg.vision) for g in grids)
        if n_pad != expected:  # single placeholders: expand them (checks the count)
            try:
                ids = expand_image_tokens(ids, grids, cfg)
            except ValueError as err:
                raise ValueError(f"prompt {b}: {err}") from None
        rows.append(ids)
        grids_per_row.append(grids)
        slots_per_row.append(slots)
    T = max(map(len, rows)) if seq_len is None else int(seq_len)
    if max(map(len, rows)) > T:
        raise ValueError(f"a prompt of {max(map(len, rows))} tokens exceeds seq_len={T}")
    vision = vision_inputs(flat, cfg.vision, num_patches, num_images) if flat else None
    per_image = (vision.patches.shape[1] // cfg.vision.merge_unit) if flat else 0
    input_ids = np.full((B, T), pad_id, np.int32)
    positions = np.zeros((3, B, T), np.int32)
    image_index = np.full((B, T), -1, np.int32)
    deltas = np.zeros(B, np.int32)
    for b, (ids, grids, slots) in enumerate(zip(rows, grids_per_row, slots_per_row)):
        n = len(ids)
        input_ids[b, :n] = ids
        pos, deltas[b] = rope_index(ids, grids, cfg)
        positions[:, b, :n] = pos
        # padding continues the text positions (never attended to by real tokens)
        positions[:, b, n:] = (pos.max() + 1 if n else 0) + np.arange(T - n)
        is_img = np.flatnonzero(np.asarray(ids) == cfg.image_token_id)
        index = []
        for g, slot in zip(grids, slots):
            index += (slot * per_image + np.arange(num_image_tokens(g, cfg.vision))).tolist()
        image_index[b, is_img] = index
    return VLBatch(input_ids, positions, image_index, vision,
                   np.asarray(list(map(len, rows)), np.int32), deltas)
