"""Inference cost as the MindZero paper reports it (appendix A.2, eq. 6).

FLOPs = 2 x P_active x N_tokens, with P_active the active parameter count (all parameters for
the dense decoders here) and N_tokens every processed token, prompt and generated alike.
"""

from __future__ import annotations

from jaxtom.models.config import ModelConfig


def active_params(model_or_config, *, include_embeddings: bool = True) -> int:
    """Active parameters of a dense decoder (config or model); tied embeddings count once."""
    cfg = getattr(model_or_config, "config", model_or_config)
    if not isinstance(cfg, ModelConfig):
        raise TypeError(f"expected a Decoder or ModelConfig, got {type(model_or_config).__name__}")
    return cfg.num_params(include_embeddings=include_embeddings)


def inference_flops(p_active: int | float, n_tokens: int | float) -> float:
    """2 x P_active x N_tokens."""
    if p_active < 0 or n_tokens < 0:
        raise ValueError(f"p_active and n_tokens must be >= 0, got {p_active}, {n_tokens}")
    return 2.0 * float(p_active) * float(n_tokens)


def inference_tflops(p_active: int | float, n_tokens: int | float) -> float:
    """The paper's tables' unit: trillions of FLOPs."""
    return inference_flops(p_active, n_tokens) / 1e12
