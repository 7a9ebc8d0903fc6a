"""What a GRPO update is configured by and what it carries between calls: `StepConfig`,
`TrainState`, the optimiser and its learning-rate schedule (`jaxtom.rl.step.Learner` runs
them)."""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import optax
from flax import struct

REFERENCES = ("frozen_copy", "lora_disabled", "batch", "none")


@dataclasses.dataclass(frozen=True)
class StepConfig:
    """Static hyperparameters of the update (hashable: part of what gets compiled).

    `warmup_steps` counts rollout batches (`Learner.update` calls, the trainer's step), as
    does the schedule's length, the run's `trainer.total_steps` (one number: the loop and the
    schedule cannot disagree). The LR schedule itself runs over optimiser updates, of which
    there are `updates_per_batch = ppo_epochs * ppo_mini_batches` per rollout batch, so
    update u of batch s uses lr = schedule(s * updates_per_batch + u) on a schedule that is
    `total_steps * updates_per_batch` updates long (`make_schedule`).

    Precision (the model's `param_dtype` / `compute_dtype`; log-probs, losses, gradient
    norms and Adam moments are float32 in every mode). Persistent bytes per trained
    parameter, + the frozen reference copy (KL, reference='frozen_copy') + the transient
    gradient:
      - float32 params, bf16 compute (the default to use): 4 + 8 (Adam m, v) = 12,
        + 4 reference + 4 gradient. Weights are cast to bf16 at use; updates of 1e-6 keep.
      - bfloat16 params: 2 + 8 = 10, + 2 + 2. Updates below half a bf16 spacing (~6e-5 at
        |w| ~ 1e-2) round away: one lr-1e-6 update changes ~2% of the weights, not ~98%.
      - bfloat16 params, compensated_updates=True: 2 + 2 (compensation) + 8 = 12, + 2 + 2.
        Kahan summation carries what rounding lost, so small updates accumulate (as the
        compensated bf16 AdamW behind EasyR1's adamw_bf16 does); it saves only the
        reference's and the gradients' bytes.
    """
    clip_low: float = 0.2
    clip_high: float = 0.2
    dual_clip: float = 3.0
    kl_coef: float = 0.01
    lambda_pred: float = 0.0
    lambda_entropy: float = 0.0
    learning_rate: float = 1e-6
    warmup_steps: int = 0
    end_lr_ratio: float = 0.0
    weight_decay: float = 0.01
    max_grad_norm: float = 1.0
    adam_b1: float = 0.9
    adam_b2: float = 0.999
    adam_eps: float = 1e-8
    # gradient accumulation inside one update, at most this many micro-batches (fewer when a
    # device holds fewer rows of a mini-batch); the same update for any value
    micro_batches: int = 1
    ppo_mini_batches: int = 1  # optimiser updates per rollout batch and epoch
    ppo_epochs: int = 1  # passes over the rollout batch
    # bf16 (param_dtype) weights: add each update with Kahan compensation (see below)
    compensated_updates: bool = False
    lora: bool = False  # train only the LoRA adapters (the model must carry them)
    # a vision-language policy's vision tower (parameters under `visual`) stays as loaded
    # (MindZero: during SSRL; its format warm-up trains the whole model); False trains it,
    # as the public MindZero config does
    freeze_vision: bool = False
    reference: str = "auto"  # frozen_copy | lora_disabled | batch | none | auto

    @property
    def updates_per_batch(self) -> int:
        return self.ppo_epochs * self.ppo_mini_batches

    def resolved_reference(self) -> str:
        if self.reference != "auto":
            return self.reference
        if self.kl_coef == 0:
            return "none"
        return "lora_disabled" if self.lora else "frozen_copy"


@struct.dataclass
class TrainState:
    step: jax.Array  # int32: rollout batches (`Learner.update` calls) so far
    params: Any  # trainable nnx.State (all params, or only the LoRA adapters)
    frozen: Any  # the rest of the model (base weights under LoRA; empty otherwise)
    ref_params: Any  # frozen copy of the initial trainable params, or None
    opt_state: Any
    rng: jax.Array  # uint32 raw key data, for the trainer's sampling


def make_schedule(cfg: StepConfig, total_steps: int):
    """Warmup + cosine LR as a function of the optimiser-update index (not the rollout step),
    decaying over `total_steps` rollout batches (the run's `trainer.total_steps`)."""
    u = cfg.updates_per_batch
    warmup, total = cfg.warmup_steps * u, total_steps * u
    return optax.warmup_cosine_decay_schedule(
        0.0 if warmup else cfg.learning_rate, cfg.learning_rate,
        warmup, max(total, warmup + 1), cfg.learning_rate * cfg.end_lr_ratio)


def make_optimizer(cfg: StepConfig) -> optax.GradientTransformation:
    """Global-norm clipping, then AdamW's direction (Adam + decoupled weight decay).

    The learning rate is left out: the step multiplies by -schedule(update index) itself, so
    the schedule follows the explicit update counter (state.step * updates_per_batch + u)
    rather than Adam's count, which skipped (empty or non-finite) updates do not advance.
    `params - lr * direction` is exactly optax.adamw's update.
    """
    return optax.chain(
        optax.clip_by_global_norm(cfg.max_grad_norm),
        optax.scale_by_adam(b1=cfg.adam_b1, b2=cfg.adam_b2, eps=cfg.adam_eps),
        optax.add_decayed_weights(cfg.weight_decay))
