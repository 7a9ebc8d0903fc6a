"""The household ELBO of a goal-particle completion (MindZero's reward on the household).

ELBO (paper eq. 4, the public `compute_score_prr_v3`), per sample b over its hypotheses i:

    R_b = sum_i q_i * max(log_lik_i + w_prior * log_prior_i, log floor)
          + w_entropy * H(q),       H(q) = -sum_{q_i > 0} q_i log q_i,

i.e. `sum q log max(lik * prior, 1e-10) + H(q)` at the defaults. The terms come in as arrays
(`log_lik`, `log_prior` [B, N], aligned with each sample's particles, 0 on padding), so any
likelihood source plugs in: the symbolic planner's exact log P(actions | goal) or the LLM
estimators of `llm_prompts` (already floored at log 1e-10). `empty` [B, N] marks hypotheses
with nothing left to do (the public code gives them p = 0: they score log floor). NaN scores
count as p = 0. Ablations (Table 2): `prior_weight=0` ("w/o prior"), `entropy_weight=0`
("w/o entropy bonus"); a single hypothesis is `num_particles=1` in the prompt and parser.

Malformed completions (ok False) get `format_penalty`. The public code's constant is
log(1e-10) = -23.03, which *ties* the worst well-formed reward (every hypothesis floored and
q one-hot): a policy gains nothing by getting the format right in that case. The default
here (`format_penalty=None`) is `log(likelihood_floor) - 1` = -24.03, strictly below every well-formed
reward for any weights >= 0 (each hypothesis term is >= log floor and H >= 0); pass
`format_penalty=-23.03` for the public value.

The weights, floor and penalty are the one `jaxtom.mindzero.reward.RewardConfig`'s (its
`likelihood_floor`; `q_floor` is the gridworld's). Public functions: `elbo_reward(log_lik,
q, ok, log_prior=None, empty=None, cfg=...) -> (reward [B], terms)`, `particle_rewards(results,
log_likelihood_fn, log_prior_fn, ...)` (parse results + batched scorers -> rewards),
`penalty(cfg)`.
"""

from __future__ import annotations

import math
from typing import Callable, Sequence

import numpy as np

from jaxtom.household.goals import Goal
from jaxtom.mindzero.household.qa_reward import clean_scores
from jaxtom.mindzero.reward import RewardConfig

PUBLIC_FORMAT_PENALTY = math.log(1e-10)  # -23.03, the public code's malformed reward


def penalty(cfg: RewardConfig) -> float:
    """A malformed completion's reward: `format_penalty`, or log(likelihood_floor) - 1."""
    if cfg.format_penalty is not None:
        return float(cfg.format_penalty)
    return math.log(cfg.likelihood_floor) - 1.0


def _batch(x, shape, name, fill=0.0):
    if x is None:
        return np.full(shape, fill, np.float64)
    x = np.asarray(x, np.float64)
    if x.shape != shape:
        raise ValueError(f"{name} must have shape {shape} (like q), got {x.shape}")
    return x


def elbo_reward(log_lik, q, ok, log_prior=None, empty=None, cfg: RewardConfig = RewardConfig()):
    """(reward [B] float64, terms) for a batch of parsed samples.

    log_lik, log_prior (None: no prior term), empty (None: none): [B, N] per hypothesis;
    q: [B, N] normalised probabilities, 0 on padding; ok: [B] parse succeeded.
    terms: "score" (the q-weighted floored log(lik * prior)), "likelihood" and "prior"
    (q-weighted log terms, unfloored but NaN-free, for logging), "entropy", "valid".
    """
    q = np.asarray(q, np.float64)
    if q.ndim != 2:
        raise ValueError(f"q must be [batch, particles], got shape {q.shape}")
    ok = np.asarray(ok, bool)
    if ok.shape != q.shape[:1]:
        raise ValueError(f"ok must be [batch] = {q.shape[:1]}, got {ok.shape}")
    log_floor = math.log(cfg.likelihood_floor)
    ll = clean_scores(_batch(log_lik, q.shape, "log_lik"))
    lp = clean_scores(_batch(log_prior, q.shape, "log_prior"))
    live = q > 0
    joint = ll + (cfg.prior_weight * lp if cfg.prior_weight else 0.0)
    if empty is not None:
        joint = np.where(np.asarray(empty, bool), -np.inf, joint)
    per = np.maximum(joint, log_floor)
    score = np.sum(np.where(live, q * per, 0.0), axis=1)
    entropy = -np.sum(np.where(live, q * np.log(np.where(live, q, 1.0)), 0.0), axis=1)
    value = score + cfg.entropy_weight * entropy
    reward = np.where(ok, value, penalty(cfg))
    finite = lambda x: np.where(live, q * np.maximum(x, log_floor * 1e3), 0.0).sum(1)
    terms = {"score": np.where(ok, score, 0.0), "likelihood": np.where(ok, finite(ll), 0.0),
             "prior": np.where(ok, finite(lp), 0.0), "entropy": np.where(ok, entropy, 0.0),
             "valid": ok.astype(np.float64)}
    return reward, terms


GoalScoreFn = Callable[[Sequence[int], Sequence[Goal]], np.ndarray]


def particle_rewards(results: Sequence, log_likelihood_fn: GoalScoreFn,
                     log_prior_fn: GoalScoreFn | None = None, *, max_particles: int,
                     cfg: RewardConfig = RewardConfig()):
    """Rewards for parsed completions (`particles.parse_particles` results), scoring every
    hypothesis of the batch in one call per estimator.

    `log_likelihood_fn(samples, goals)` / `log_prior_fn(samples, goals)` get parallel lists
    (sample index b, goal) and return one log-score each (e.g. `llm_prompts.llm_log_likelihood`
    over each sample's context, or the symbolic planner). The prior is skipped (not called)
    when `log_prior_fn` is None or `cfg.prior_weight` is 0. Returns (reward [B], terms).
    """
    from jaxtom.mindzero.household.particles import to_arrays

    goals, q, ok = to_arrays(results, max_particles)
    samples = [b for b, gs in enumerate(goals) for _ in gs]
    flat = [g for gs in goals for g in gs]
    ll = np.zeros(q.shape)
    lp = None
    if flat:
        idx = tuple(np.array([(b, i) for b, gs in enumerate(goals) for i in range(len(gs))]).T)
        ll[idx] = _scores(log_likelihood_fn, samples, flat, "log_likelihood_fn")
        if log_prior_fn is not None and cfg.prior_weight:
            lp = np.zeros(q.shape)
            lp[idx] = _scores(log_prior_fn, samples, flat, "log_prior_fn")
    return elbo_reward(ll, q, ok, lp, cfg=cfg)


def _scores(fn, samples, goals, name) -> np.ndarray:
    out = np.asarray(fn(samples, goals), np.float64).reshape(-1)
    if out.shape != (len(goals),):
        raise ValueError(f"{name} returned {out.shape[0]} scores for {len(goals)} goals")
    return out
