"""GRPO for both papers: losses, the prediction-gradient cap, the sharded update step, the
trainer. `rl` knows tokens, masks and advantages, not which paper produced them."""

from jaxtom.rl.batch import (Batch, PredictionBatch, first_fit_rows, pack_sequences,
                             pack_shared_prompts, prediction_batch)
from jaxtom.rl.gradients import combine_gradients, global_norm, prediction_scale
from jaxtom.rl.losses import (decision_entropy, dual_clip_surrogate, grpo_loss, grpo_terms,
                              group_advantages, k3_kl, prediction_nll, prediction_terms,
                              token_entropy, token_logprobs)
from jaxtom.rl.step import Learner
from jaxtom.rl.step_config import StepConfig, TrainState, make_optimizer

__all__ = ["Batch", "Learner", "PredictionBatch", "StepConfig", "TrainState",
           "combine_gradients", "decision_entropy", "dual_clip_surrogate", "global_norm",
           "first_fit_rows", "group_advantages", "grpo_loss", "grpo_terms", "k3_kl",
           "make_optimizer", "pack_sequences", "pack_shared_prompts", "prediction_batch",
           "prediction_nll", "prediction_scale",
           "prediction_terms", "token_entropy", "token_logprobs"]
