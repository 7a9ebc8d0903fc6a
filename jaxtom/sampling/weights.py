"""The weights a sampler reads: the compute dtype, once per rollout, rather than float32
master weights cast at every decode step."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxtom.models.config import ModelConfig


def samples_a_copy(cfg) -> bool:
    """Whether a sampler reads a compute-dtype copy of the weights (`sampling_params`)."""
    return isinstance(cfg, ModelConfig) and cfg.compute_dtype != cfg.param_dtype


def sampling_params(params, cfg):
    """The parameters a sampler reads: every floating array cast once to the compute dtype
    when it differs from the parameter dtype (a text decoder's forward casts each weight to
    the compute dtype where it uses it, so a rollout need not read float32 master weights
    at every decode step: half the bytes per step for bfloat16). XLA may keep excess
    precision in the per-use casts, so tokens can differ from sampling the float32 weights
    in the last bits; the update scores its own log-probs, so the objective does not see it.
    Other configs (Qwen3-VL's, float32 compute) get `params` back unchanged."""
    if not samples_a_copy(cfg):
        return params
    compute = jnp.dtype(cfg.compute_dtype)
    return jax.tree.map(
        lambda x: x.astype(compute) if jnp.issubdtype(x.dtype, jnp.floating) else x, params)
