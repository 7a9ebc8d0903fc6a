"""The Qwen3-VL vision tower in Flax NNX: a pre-LayerNorm ViT with 2x2 patch merging.

- Patch embedding: a Conv3d with kernel = stride = (temporal 2, 16, 16) on non-overlapping
  patches is a linear map on each flattened patch, so it is stored and applied as one.
- Absolute positions: a learned square table (48x48 for the released models) resampled
  bilinearly with aligned corners to each image's patch grid; the taps and weights come from
  the host (`image_processing.vision_inputs`).
- 2-D rotary on q/k: the first half of each head's rotary frequencies turn with the patch
  row, the second half with its column.
- Blocks: LayerNorm -> fused qkv attention (each image attends only to its own patches) ->
  LayerNorm -> tanh-GELU MLP, both residual.
- Merger: LayerNorm, then 4 neighbouring patches (one 2x2 block) concatenated -> Linear ->
  exact GELU -> Linear to the text width. DeepStack mergers take the hidden states after
  chosen blocks and normalise after concatenating; their outputs are added to the text
  hidden states at image positions after the first decoder layers.

Images are batched [I, P, ...] (padded to a common patch count) rather than packed into one
sequence, so attention costs I x P^2, not (I x P)^2.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx

from jaxtom.models.decoder import _param, apply_rope
from jaxtom.models.image_processing import VisionInputs
from jaxtom.models.vl_config import VisionConfig

# parameter name -> logical axes (after the stacked-layer axis, where there is one)
BLOCK_AXES = {
    "norm1_weight": ("norm",), "norm1_bias": ("norm",),
    "norm2_weight": ("norm",), "norm2_bias": ("norm",),
    "qkv": ("embed", "mlp"), "qkv_bias": ("mlp",),
    "proj": ("mlp", "embed"), "proj_bias": ("norm",),
    "fc1": ("embed", "mlp"), "fc1_bias": ("mlp",),
    "fc2": ("mlp", "embed"), "fc2_bias": ("norm",),
}
MERGER_AXES = {"norm_weight": ("norm",), "norm_bias": ("norm",), "fc1": ("embed", "mlp"),
               "fc1_bias": ("mlp",), "fc2": ("mlp", "embed"), "fc2_bias": ("norm",)}


def block_shapes(cfg: VisionConfig) -> dict[str, tuple[int, ...]]:
    d, f = cfg.hidden_size, cfg.intermediate_size
    return {"norm1_weight": (d,), "norm1_bias": (d,), "norm2_weight": (d,), "norm2_bias": (d,),
            "qkv": (d, 3 * d), "qkv_bias": (3 * d,), "proj": (d, d), "proj_bias": (d,),
            "fc1": (d, f), "fc1_bias": (f,), "fc2": (f, d), "fc2_bias": (d,)}


def merger_shapes(cfg: VisionConfig, postshuffle: bool) -> dict[str, tuple[int, ...]]:
    d4 = cfg.hidden_size * cfg.merge_unit
    n = d4 if postshuffle else cfg.hidden_size
    return {"norm_weight": (n,), "norm_bias": (n,), "fc1": (d4, d4), "fc1_bias": (d4,),
            "fc2": (d4, cfg.out_hidden_size), "fc2_bias": (cfg.out_hidden_size,)}


def _init(rngs, name, shape, axes, dt, scale):
    if name.endswith("_weight"):
        return _param(rngs, shape, axes, dt, "ones")
    return _param(rngs, shape, axes, dt, "zeros" if name.endswith("bias") else "normal", scale)


class Stacked(nnx.Module):
    """Parameters stacked over a leading axis (blocks, or deepstack mergers)."""

    def __init__(self, shapes: dict, axes: dict, n: int, dt, rngs: nnx.Rngs, scale: float):
        for name, shape in shapes.items():
            setattr(self, name, _init(rngs, name, (n, *shape), ("layers", *axes[name]), dt,
                                      scale))

    def arrays(self) -> dict[str, jax.Array]:
        return {k: v[...] for k, v in vars(self).items() if isinstance(v, nnx.Variable)}


class Merger(nnx.Module):
    def __init__(self, cfg: VisionConfig, dt, rngs: nnx.Rngs):
        for name, shape in merger_shapes(cfg, False).items():
            setattr(self, name, _init(rngs, name, shape, MERGER_AXES[name], dt,
                                      cfg.initializer_range))

    def arrays(self) -> dict[str, jax.Array]:
        return {k: v[...] for k, v in vars(self).items() if isinstance(v, nnx.Variable)}


def layer_norm(x, weight, bias, eps):
    """LayerNorm in float32, cast back to the input dtype."""
    x32 = x.astype(jnp.float32)
    mean = jnp.mean(x32, -1, keepdims=True)
    var = jnp.mean(jnp.square(x32 - mean), -1, keepdims=True)
    y = (x32 - mean) * jax.lax.rsqrt(var + eps)
    return (y * weight.astype(jnp.float32) + bias.astype(jnp.float32)).astype(x.dtype)


def _dense(x, p, name):
    return x @ p[name].astype(x.dtype) + p[name + "_bias"].astype(x.dtype)


def vision_block(p, h, cos, sin, valid, cfg: VisionConfig):
    """One ViT block on h [I, P, D]; padded patches are masked out as keys."""
    I, P, D = h.shape
    H, hd = cfg.num_heads, cfg.head_dim
    x = layer_norm(h, p["norm1_weight"], p["norm1_bias"], cfg.layer_norm_eps)
    qkv = _dense(x, p, "qkv").reshape(I, P, 3, H, hd)
    q, k, v = apply_rope(qkv[:, :, 0], cos, sin), apply_rope(qkv[:, :, 1], cos, sin), qkv[:, :, 2]
    scores = jnp.einsum("iqhd,ikhd->ihqk", q, k).astype(jnp.float32) * (hd ** -0.5)
    scores = jnp.where(valid[:, None, None, :], scores, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    attn = jnp.einsum("ihqk,ikhd->iqhd", probs, v).reshape(I, P, D)
    h = h + _dense(attn, p, "proj")
    x = layer_norm(h, p["norm2_weight"], p["norm2_bias"], cfg.layer_norm_eps)
    return h + _dense(jax.nn.gelu(_dense(x, p, "fc1"), approximate=True), p, "fc2")


def merge(p, h, cfg: VisionConfig, postshuffle: bool):
    """[I, P, D] patches -> [I, P/4, out] tokens; LayerNorm before (main merger) or after
    (DeepStack) concatenating each 2x2 block."""
    I, P, D = h.shape
    if postshuffle:
        x = layer_norm(h.reshape(I, P // cfg.merge_unit, -1), p["norm_weight"], p["norm_bias"],
                       cfg.layer_norm_eps)
    else:
        x = layer_norm(h, p["norm_weight"], p["norm_bias"], cfg.layer_norm_eps)
        x = x.reshape(I, P // cfg.merge_unit, -1)
    return _dense(jax.nn.gelu(_dense(x, p, "fc1"), approximate=False), p, "fc2")


def rotary_inv_freq(cfg: VisionConfig) -> np.ndarray:
    """head_dim/4 frequencies, shared by the row and the column halves."""
    dim = cfg.head_dim // 2
    return (1.0 / cfg.rope_theta ** (np.arange(0, dim, 2, dtype=np.float32) / dim)).astype(
        np.float32)


class VisionTower(nnx.Module):
    """`tower(VisionInputs)` -> (tokens [I, P/4, out], deepstack tuple of [I, P/4, out])."""

    def __init__(self, cfg: VisionConfig, *, rngs: nnx.Rngs, param_dtype: str = "float32",
                 compute_dtype: str = "float32"):
        self.config = cfg
        self.compute_dtype = compute_dtype
        dt = jnp.dtype(param_dtype)
        std = cfg.initializer_range
        self.patch_embed = _param(rngs, (cfg.patch_dim, cfg.hidden_size), (None, "embed"), dt,
                                  scale=std)
        self.patch_embed_bias = _param(rngs, (cfg.hidden_size,), ("norm",), dt, "zeros")
        self.pos_embed = _param(rngs, (cfg.num_position_embeddings, cfg.hidden_size),
                                (None, "embed"), dt, scale=std)
        self.blocks = Stacked(block_shapes(cfg), BLOCK_AXES, cfg.depth, dt, rngs, std)
        self.merger = Merger(cfg, dt, rngs)
        n_ds = len(cfg.deepstack_visual_indexes)
        self.deepstack = Stacked(merger_shapes(cfg, True), MERGER_AXES, n_ds, dt, rngs, std)

    def __call__(self, inputs: VisionInputs, *, remat: bool = False):
        """`remat`: keep only each block's input for the backward pass (recompute the rest,
        attention matrices included), as the decoder does for deep models."""
        cfg = self.config
        dt = jnp.dtype(self.compute_dtype)
        patches = jnp.asarray(inputs.patches).astype(dt)
        h = patches @ self.patch_embed[...].astype(dt) + self.patch_embed_bias[...].astype(dt)
        table = self.pos_embed[...]
        pos = (jnp.take(table, jnp.asarray(inputs.pos_index), axis=0).astype(jnp.float32)
               * jnp.asarray(inputs.pos_weight)[..., None]).sum(-2)
        h = h + pos.astype(dt)
        angles = jnp.asarray(inputs.rot_pos).astype(jnp.float32)[..., None] * jnp.asarray(
            rotary_inv_freq(cfg))  # [I, P, 2, hd/4]
        angles = angles.reshape(*angles.shape[:2], -1)  # rows' then columns' frequencies
        cos, sin = jnp.cos(angles), jnp.sin(angles)
        valid = jnp.asarray(inputs.valid)
        blocks = self.blocks.arrays()
        deep = self.deepstack.arrays()
        ds_index = {layer: i for i, layer in enumerate(cfg.deepstack_visual_indexes)}
        features = [None] * len(ds_index)
        # scan runs of blocks between DeepStack taps: compiles like one block per run
        stops = sorted(set(cfg.deepstack_visual_indexes) | {cfg.depth - 1})
        start = 0

        def step(h, p):
            return vision_block(p, h, cos, sin, valid, cfg), None

        if remat:
            step = jax.checkpoint(step, policy=jax.checkpoint_policies.nothing_saveable)
        for stop in stops:
            run = {k: v[start:stop + 1] for k, v in blocks.items()}
            h, _ = jax.lax.scan(step, h, run)
            if stop in ds_index:
                i = ds_index[stop]
                features[i] = merge({k: v[i] for k, v in deep.items()}, h, cfg, True)
            start = stop + 1
        return merge(self.merger.arrays(), h, cfg, False), tuple(features)
