"""LoRA adapters on the stacked decoder projections.

Adapters are `nnx.LoRAParam` variables next to the frozen base kernels, so an optimizer or
`nnx.grad` filtered on `nnx.LoRAParam` trains only them; B starts at zero, which makes a
freshly adapted model compute exactly the base logits.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from flax import nnx
from jax.sharding import NamedSharding

from jaxtom import parallel
from jaxtom.models.decoder import LINEARS, Decoder, linear_axes, linear_shape

DEFAULT_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj")


def add_lora(model: Decoder, *, rank: int, alpha: float | None = None,
             targets: tuple[str, ...] = DEFAULT_TARGETS, key: jax.Array | None = None
             ) -> Decoder:
    """Adds rank-`rank` adapters (scale alpha/rank) to `targets`, in place; returns the model."""
    if rank <= 0:
        raise ValueError(f"LoRA rank must be a positive int, got {rank}")
    bad = [t for t in targets if t not in LINEARS]
    if bad:
        raise ValueError(f"unknown LoRA targets {bad}; choose from {LINEARS}")
    cfg, layers = model.config, model.layers
    if layers.lora_scale:
        raise ValueError("model already has LoRA adapters; merge_lora them first")
    key = jax.random.key(0) if key is None else key
    dtype = jnp.dtype(cfg.param_dtype)
    sharding = getattr(model.embed_tokens[...], "sharding", None)
    mesh = sharding.mesh if isinstance(sharding, NamedSharding) else None

    def param(value, axes):
        # a model on a mesh gets its adapters placed beside its weights (a multi-process
        # mesh accepts no single-device arrays in the update)
        if mesh is not None:
            value = jax.device_put(value, parallel.named_sharding(mesh, axes, value.shape))
        return nnx.LoRAParam(value, logical_axes=axes)

    for target, k in zip(targets, jax.random.split(key, len(targets))):
        d_in, d_out = linear_shape(cfg, target)
        ax_in, ax_out = linear_axes(target)
        a = jax.random.normal(k, (cfg.num_layers, d_in, rank), jnp.float32) / jnp.sqrt(d_in)
        setattr(layers, target + "_lora_a", param(a.astype(dtype), ("layers", ax_in, "lora_rank")))
        setattr(layers, target + "_lora_b", param(
            jnp.zeros((cfg.num_layers, rank, d_out), dtype), ("layers", "lora_rank", ax_out)))
    layers.lora_scale = tuple((t, float(alpha if alpha is not None else rank) / rank) for t in targets)
    return model


def merge_lora(model: Decoder) -> Decoder:
    """A copy of `model` with every adapter folded into its base kernel (for export)."""
    model = nnx.clone(model)
    layers = model.layers
    for target, scale in dict(layers.lora_scale).items():
        a = getattr(layers, target + "_lora_a")[...].astype(jnp.float32)
        b = getattr(layers, target + "_lora_b")[...].astype(jnp.float32)
        base = getattr(layers, target)
        base[...] = (base[...].astype(jnp.float32)
                     + jnp.einsum("lir,lro->lio", a, b) * scale).astype(base[...].dtype)
        delattr(layers, target + "_lora_a")
        delattr(layers, target + "_lora_b")
    layers.lora_scale = ()
    return model
