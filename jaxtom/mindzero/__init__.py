"""MindZero on the gridworld: goal particles, the ELBO reward, prompts, data, training, eval.

Public names
    `parse_particles(text, scene, *, mode="train"|"eval")` -> `Particles` or `ParseFailure`
    (never raises on model output); `elbo_reward(...)` (eq. 4 on a batch) and
    `elbo_reward_batch(...)` (planner likelihoods + eq. 4 in one jitted call);
    `qa_reward`, `parse_choice` (the public code's QA reward); `RewardConfig`.
    Question answering as the paper trains it (`mindzero.data.task="qa"`): `parse_answer`,
    `qa_rewards` (`jaxtom.mindzero.qa`), training in `qa_train`, evaluation in `qa_eval`.
"""

from jaxtom.mindzero.particles import (
    Particles, ParseFailure, extract_json, format_particles, normalise, parse_particles,
    scene_labels, to_arrays,
)
from jaxtom.eval.answers import parse_answer
from jaxtom.mindzero.qa import qa_rewards
from jaxtom.mindzero.reward import (
    RewardConfig, cumulative_log_likelihoods, elbo_reward, elbo_reward_batch, parse_choice,
    qa_reward, sample_log_likelihoods,
)

__all__ = ["Particles", "ParseFailure", "RewardConfig", "cumulative_log_likelihoods",
           "elbo_reward", "elbo_reward_batch", "extract_json", "format_particles", "normalise",
           "parse_answer", "parse_choice", "parse_particles", "qa_reward", "qa_rewards",
           "sample_log_likelihoods", "scene_labels", "to_arrays"]
