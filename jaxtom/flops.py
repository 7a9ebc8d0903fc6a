"""Inference cost as the MindZero paper reports it (appendix A.2, eq. 6).

FLOPs = 2 x P_active x N_tokens, with P_active the active parameter count (all parameters for
the dense decoders here) and N_tokens every processed token, prompt and generated alike.
"""

from __future__ import annotations

from jaxtom.models.attention import attended_keys
from jaxtom.models.config import ModelConfig
from jaxtom.plan_shapes import image_patches


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


# ---- training FLOPs (`jaxtom plan`), counted from the model's shapes ----------------
def vision_flops(vcfg, images: int, patches: int) -> float:
    """Matmul FLOPs of the Qwen3-VL vision tower over `images` pictures of `patches` patches:
    patch embedding, blocks (qkv, proj, MLP, full attention within a picture) and the main
    and DeepStack mergers (on the 2x2-merged tokens)."""
    d, f, m = vcfg.hidden_size, vcfg.intermediate_size, vcfg.merge_unit
    d4 = d * m
    per_patch = vcfg.patch_dim * d + vcfg.depth * (4 * d * d + 2 * d * f + 2 * patches * d)
    per_token = (1 + len(vcfg.deepstack_visual_indexes)) * (d4 * d4 + d4 * vcfg.out_hidden_size)
    return 2.0 * images * (patches * per_patch + patches // m * per_token)


def forward_flops(mcfg, rows: int, seq: int, lora_rank: int = 0, patches: int = 0) -> float:
    """Matmul FLOPs of one full forward over [rows, seq]: weights, LM head and attention
    (for a VLConfig, plus the vision tower on each row's picture of `patches` patches).

    Attention counts the scores the decoder forms: each block of queries against the keys up
    to its end (`attention.attended_keys`; masked scores inside a block are computed too).
    """
    if mcfg.kind == "vision_language":
        return (forward_flops(mcfg.text, rows, seq, lora_rank)
                + vision_flops(mcfg.vision, rows, patches))

    d, f, hd, L = mcfg.hidden_size, mcfg.intermediate_size, mcfg.head_dim, mcfg.num_layers
    q, kv = mcfg.num_heads * hd, mcfg.num_kv_heads * hd
    weights = L * (2 * d * q + 2 * d * kv + 3 * d * f) + d * mcfg.vocab_size
    if lora_rank:  # default targets: q, k, v, o
        weights += L * lora_rank * ((d + q) * 2 + (d + kv) * 2)
    # multiply-adds per token: QK^T and PV, (keys it attends) x q each
    attention = L * 2 * attended_keys(seq) * q
    return 2.0 * rows * seq * (weights + attention)


def update_flops(config, mcfg, rows: int, seq: int, pred_rows: int = 0,
                 pred_seq: int = 0) -> float:
    """FLOPs of one rollout batch's update program over `rows` rows of `seq` tokens.

    Every epoch runs the policy forward + backward over all rows (split into mini-batches);
    full fine-tuning's backward costs two forwards (activation and weight gradients), under
    LoRA the frozen weights need only activation gradients, so about one. The reference
    forward runs once; with several updates per batch the rollout policy's log-probs are
    scored once more before the first update. Prediction rows (CToM) get a forward and
    backward of their own loss in every epoch.
    """

    step = config.step
    lora = config.model.lora_rank
    patches = image_patches(config, mcfg.vision) if mcfg.kind == "vision_language" else 0
    fwd = forward_flops(mcfg, rows, seq, lora, patches)
    epochs = getattr(step, "ppo_epochs", 1)
    updates = epochs * getattr(step, "ppo_mini_batches", 1)
    policy = epochs * (fwd + (fwd if lora else 2 * fwd))
    ref = fwd if step.resolved_reference() in ("frozen_copy", "lora_disabled") else 0.0
    old = fwd if updates > 1 else 0.0
    pred_fwd = forward_flops(mcfg, pred_rows, pred_seq, lora) if pred_rows else 0.0
    pred = epochs * (pred_fwd + (pred_fwd if lora else 2 * pred_fwd))
    return policy + ref + old + pred


# ---- compiling --------------------------------------------------------------------------
