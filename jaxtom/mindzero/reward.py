"""The MindZero rewards, batched in JAX over every sample of a GRPO batch.

ELBO (eq. 4): `R = sum_i q_i [log P(a_1:t | m_i, s_1:t) + w_prior log P(m_i)]
                   - w_entropy sum_i q_i log q_i`.
The action log-likelihood is the gridworld planner's (`goal_log_likelihoods`), computed once per
episode for all of its steps and goals, cumulated over time and gathered per sample, so a batch
of (episode, timestep, completion) samples is one jitted call. `w_prior = 0` and
`w_entropy = 0` are the paper's "w/o prior" and "w/o entropy bonus" ablations; a single
hypothesis is `num_particles = 1` in the prompt and parser.

Malformed completions get `format_penalty`. The public code uses the constant log(1e-12) =
-27.63, but the planner term sums t per-step log-likelihoods floored at log(1e-12) each, so a
wrong but well-formed guess can score far below -27.63 and a policy would learn to emit junk.
The default (`format_penalty=None`) is therefore relative: `(t + 1) log(q_floor)`, strictly below
the worst well-formed reward for that sample (with a uniform prior and no entropy credit).
QA (public code): the reward is the summed log-likelihood under the chosen option's goal.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re

import jax
import jax.numpy as jnp

from jaxtom.gridworld.inference import Trajectory, goal_log_likelihoods
from jaxtom.gridworld.types import EnvParams


@dataclasses.dataclass(frozen=True)
class RewardConfig:
    """Weights of eq. 4 and the penalty rules of every MindZero task (hashable: static under
    jit). The two domains floor different quantities, so each has its own named floor: the
    gridworld's `q_floor` (q and the prior inside their logs, and the unit of its per-step
    penalty) and the household's `likelihood_floor` (likelihood x prior inside the log, as the
    public `compute_score_prr_v3`; `jaxtom.mindzero.household.reward`). A task refuses a
    changed floor it does not use (`MindZeroSection.validate`)."""
    prior_weight: float = 1.0  # 0: "w/o prior modeling"
    entropy_weight: float = 1.0  # 0: "w/o entropy bonus"
    # None: the domain's rule, (t + 1) log(q_floor) (gridworld) or log(likelihood_floor) - 1
    # (household); a float: that constant
    format_penalty: float | None = None
    q_floor: float = 1e-12  # gridworld: q (and the prior) floor inside log, the penalty's unit
    likelihood_floor: float = 1e-10  # household: lik x prior floor inside the log
    duplicates: str = "reject"  # training parse: reject (public code) or merge repeated goals

    def __post_init__(self):
        for name in ("q_floor", "likelihood_floor"):
            value = getattr(self, name)
            if not 0.0 < value < 1.0:
                raise ValueError(f"RewardConfig.{name} must be in (0, 1), got {value}")
        if self.prior_weight < 0 or self.entropy_weight < 0:
            raise ValueError("RewardConfig prior_weight and entropy_weight must be >= 0, got "
                             f"{self.prior_weight}, {self.entropy_weight}")
        if self.duplicates not in ("reject", "merge"):
            raise ValueError(f"RewardConfig.duplicates must be reject or merge, got "
                             f"{self.duplicates!r}")
        if self.format_penalty is not None and not math.isfinite(self.format_penalty):
            raise ValueError(f"format_penalty must be finite or None, got {self.format_penalty}")


def _penalty(num_steps, cfg: RewardConfig):
    if cfg.format_penalty is not None:
        return jnp.full(jnp.shape(num_steps), cfg.format_penalty, jnp.float32)
    return (jnp.asarray(num_steps, jnp.float32) + 1.0) * math.log(cfg.q_floor)


def elbo_reward(log_lik, goals, q, ok, num_steps, log_prior=None,
                cfg: RewardConfig = RewardConfig()):
    """Eq. 4 for a batch of parsed samples; returns (reward [B], terms dict of [B]).

    log_lik: [B, G] cumulative `log P(a_1:t | g)` of each sample's observed actions;
    goals: [B, N] ordered-goal indices; q: [B, N] normalised probabilities, 0 on padding;
    ok: [B] parse succeeded; num_steps: [B] observed actions t;
    log_prior: None (uniform over G), [G] or [B, G].
    """
    log_lik = jnp.asarray(log_lik, jnp.float32)
    q = jnp.asarray(q, jnp.float32)
    goals = jnp.asarray(goals, jnp.int32)
    if log_lik.ndim != 2 or goals.shape != q.shape or goals.shape[0] != log_lik.shape[0]:
        raise ValueError(f"need log_lik [B, G], goals and q [B, N]; got {log_lik.shape}, "
                         f"{goals.shape}, {q.shape}")
    num_goals = log_lik.shape[1]
    picked = jnp.take_along_axis(log_lik, goals, axis=1)
    live = q > 0
    likelihood = jnp.sum(jnp.where(live, q * picked, 0.0), axis=1)
    if log_prior is None:
        prior_term = jnp.where(ok, -math.log(num_goals), 0.0)
    else:
        lp = jnp.broadcast_to(jnp.asarray(log_prior, jnp.float32), log_lik.shape)
        lp = jnp.maximum(lp, math.log(cfg.q_floor))  # a zero prior is a floor, not -inf
        prior_term = jnp.sum(jnp.where(live, q * jnp.take_along_axis(lp, goals, 1), 0.0), 1)
    entropy = -jnp.sum(jnp.where(live, q * jnp.log(jnp.maximum(q, cfg.q_floor)), 0.0), axis=1)
    value = likelihood + cfg.prior_weight * prior_term + cfg.entropy_weight * entropy
    reward = jnp.where(ok, value, _penalty(num_steps, cfg))
    return reward, {"likelihood": likelihood, "prior": prior_term, "entropy": entropy,
                    "valid": ok.astype(jnp.float32)}


def cumulative_log_likelihoods(trajectories: Trajectory, params: EnvParams):
    """[E, T + 1, G]: entry t is `log P(a_1:t | g)` (entry 0 is 0), per episode."""
    per_step = goal_log_likelihoods(trajectories, params)
    return jnp.pad(jnp.cumsum(per_step, axis=-2), ((0, 0), (1, 0), (0, 0)))


def sample_log_likelihoods(trajectories: Trajectory, episode, num_steps, params: EnvParams):
    """[B, G] cumulative log-likelihoods of each sample's first `num_steps` actions."""
    table = cumulative_log_likelihoods(trajectories, params)
    steps = jnp.clip(jnp.asarray(num_steps, jnp.int32), 0, table.shape[1] - 1)
    return table[jnp.asarray(episode, jnp.int32), steps]


@functools.partial(jax.jit, static_argnames=("params", "cfg"))
def elbo_reward_batch(trajectories: Trajectory, episode, num_steps, goals, q, ok,
                      params: EnvParams, cfg: RewardConfig = RewardConfig(), log_prior=None):
    """The whole reward of a GRPO batch in one jitted call: planner likelihoods of the batch's
    E episodes ([E, T] trajectories), gathered for B samples `(episode[b], num_steps[b])`,
    then eq. 4. `log_prior` is None (uniform) or per episode [E, G]."""
    log_lik = sample_log_likelihoods(trajectories, episode, num_steps, params)
    if log_prior is not None:
        log_prior = jnp.asarray(log_prior)[jnp.asarray(episode, jnp.int32)]
    return elbo_reward(log_lik, goals, q, ok, num_steps, log_prior, cfg)


# --- QA (the public code's training reward) -------------------------------------------------
_STRICT_LETTER = re.compile(r"^\s*\(?([ab])\)?\.?\s*$", re.IGNORECASE)
_LOOSE_LETTER = re.compile(r"(?<![a-z])\(?([ab])\)?(?![a-z])", re.IGNORECASE)


def parse_choice(text: str, *, mode: str = "train") -> int:
    """0 for (a), 1 for (b), -1 if the answer is not a letter. Train mode wants only the
    letter; eval mode takes the first standalone a/b. Never raises on model output."""
    if not isinstance(text, str):
        return -1
    if mode not in ("train", "eval"):
        raise ValueError(f"mode must be 'train' or 'eval', got {mode!r}")
    match = (_STRICT_LETTER.match if mode == "train" else _LOOSE_LETTER.search)(text)
    return "ab".index(match.group(1).lower()) if match else -1


def qa_reward(log_lik, option_goals, choice, num_steps, cfg: RewardConfig = RewardConfig()):
    """[B] `log P(a_1:t | goal of the chosen option)`; -1 choices get the format penalty.
    log_lik [B, G]; option_goals [B, 2] ordered-goal indices; choice [B] in {0, 1, -1}."""
    choice = jnp.asarray(choice, jnp.int32)
    goal = jnp.take_along_axis(jnp.asarray(option_goals, jnp.int32),
                               jnp.clip(choice, 0, 1)[:, None], axis=1)
    value = jnp.take_along_axis(jnp.asarray(log_lik, jnp.float32), goal, axis=1)[:, 0]
    return jnp.where(choice >= 0, value, _penalty(num_steps, cfg))
