import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxtom.gridworld import goal_index, goal_posterior
from jaxtom.mindzero import (
    RewardConfig, elbo_reward, elbo_reward_batch, qa_reward, sample_log_likelihoods,
)
from jaxtom.mindzero.reference import elbo_reward_one
from tests.tolerance import float32_tol

FLOOR = math.log(1e-12)


def elbo_tol(params, steps: int, value: float) -> float:
    """The float32 bound (tests/tolerance.py) on one sample's reward against the float64
    reference: per step, the Boltzmann human's log-softmax over 4 moves of logits q / tau,
    |q| <= cost (1 + gamma) / (1 - gamma) + cost, where q = gamma disc(d) - cost with
    disc(d) = -cost (1 - gamma^d) / (1 - gamma) rounds ~16 ops, and gamma^d carries float32
    gamma's representation error d times (d <= height + width); the step log-likelihoods add
    over `steps`; the q-weighted sum, prior and entropy round at the reward's own size."""
    cost, gamma, tau = params.step_cost, params.gamma, params.human_tau
    logits = (cost * (1 + gamma) / (1 - gamma) + cost) / tau
    per_step = params.height + params.width + 16 + 4
    return (float32_tol(logits, per_step, max(steps, 1))
            + float32_tol(abs(value) + math.log(params.num_goals), 8))


def host_traj(episodes, e):
    return {k: np.asarray(getattr(episodes.trajectories, k))[e]
            for k in ("obj_pos", "human_pos", "helper_pos", "human_holding", "helper_holding",
                      "human_last_action", "action")}


def test_matches_reference_per_sample(episodes, params):
    rng = np.random.default_rng(0)
    B, N = 24, 3
    episode = rng.integers(0, len(episodes), B)
    steps = np.array([rng.integers(0, episodes.length[e] + 1) for e in episode])
    goals_ = np.stack([rng.choice(56, N, replace=False) for _ in range(B)]).astype(np.int32)
    q = rng.dirichlet(np.ones(N), B).astype(np.float32)
    q[0, 2] = 0.0  # padding
    q[0] /= q[0].sum()
    ok = rng.random(B) > 0.2
    pairs_of = {int(goal_index(a, b, 8)): (a, b) for a in range(8) for b in range(8) if a != b}
    for cfg in (RewardConfig(), RewardConfig(prior_weight=0.0, entropy_weight=0.0,
                                             format_penalty=-27.63)):
        reward, _ = elbo_reward_batch(episodes.trajectories, episode, steps, goals_, q, ok,
                                      params, cfg)
        walls = np.asarray(episodes.states.layout.walls)
        goal = np.asarray(episodes.states.goal)

        def reference(b, t):
            return elbo_reward_one(walls[episode[b]], host_traj(episodes, episode[b]),
                                   goal[episode[b]], t,
                                   [pairs_of[int(g)] for g, qi in zip(goals_[b], q[b]) if qi > 0],
                                   [float(qi) for qi in q[b] if qi > 0], bool(ok[b]), params,
                                   prior_weight=cfg.prior_weight,
                                   entropy_weight=cfg.entropy_weight,
                                   format_penalty=cfg.format_penalty)
        want = np.array([reference(b, int(t)) for b, t in enumerate(steps)])
        tol = np.array([elbo_tol(params, int(t), w) for t, w in zip(steps, want)])
        diff = np.abs(np.asarray(reward, np.float64) - want)
        assert np.all(diff <= tol), (diff / tol).max()
        # the reward of one step fewer (an off-by-one in the gathered likelihoods) fails it
        some = [b for b in range(B) if ok[b] and steps[b] > 0]
        short = np.array([reference(b, int(steps[b]) - 1) for b in some])
        assert np.median(np.abs(want[some] - short) / tol[some]) > 10


def test_true_goal_beats_others_and_penalty_is_worst(episodes, params):
    e, t = 0, int(episodes.length[0])
    true = int(goal_index(*np.asarray(episodes.states.goal[e]), 8))
    log_lik = sample_log_likelihoods(episodes.trajectories, [e] * 56, [t] * 56, params)
    goals_ = np.arange(56, dtype=np.int32)[:, None]
    r, _ = elbo_reward(log_lik, goals_, np.ones((56, 1)), np.ones(56, bool), np.full(56, t))
    r = np.asarray(r)
    assert int(np.argmax(r)) == true
    bad, _ = elbo_reward(log_lik, goals_, np.ones((56, 1)), np.zeros(56, bool), np.full(56, t))
    assert np.all(np.asarray(bad) < r.min())


def test_entropy_and_prior_switches():
    log_lik = jnp.zeros((1, 56))
    goals_ = jnp.array([[0, 1]])
    q = jnp.array([[0.5, 0.5]])
    ok = jnp.array([True])
    full, terms = elbo_reward(log_lik, goals_, q, ok, jnp.array([3]))
    assert float(terms["entropy"][0]) == pytest.approx(math.log(2))
    assert float(full[0]) == pytest.approx(math.log(2) - math.log(56), rel=1e-5)
    none, _ = elbo_reward(log_lik, goals_, q, ok, jnp.array([3]),
                          cfg=RewardConfig(prior_weight=0, entropy_weight=0))
    assert float(none[0]) == 0.0
    prior = jnp.full((56,), -jnp.inf).at[0].set(0.0)  # a zero prior is floored, stays finite
    r, _ = elbo_reward(log_lik, goals_, q, ok, jnp.array([3]), log_prior=prior)
    assert np.isfinite(float(r[0]))


def test_exact_posterior_maximises_elbo(episodes, params):
    """Eq. 4 over all 56 goals is maximised by the exact posterior (uniform prior)."""
    e, t = 1, 10
    log_lik = sample_log_likelihoods(episodes.trajectories, [e], [t], params)
    post = goal_posterior(jax.tree.map(lambda x: x[e], episodes.trajectories), params)[t - 1]
    goals_ = jnp.arange(56)[None]
    best, _ = elbo_reward(log_lik, goals_, post[None], jnp.array([True]), jnp.array([t]))
    mixed = 0.7 * post + 0.3 / 56
    worse, _ = elbo_reward(log_lik, goals_, mixed[None], jnp.array([True]), jnp.array([t]))
    assert float(best[0]) > float(worse[0])


def test_qa_reward():
    log_lik = jnp.arange(56.0)[None].repeat(3, 0) * -1.0
    r = qa_reward(log_lik, jnp.array([[3, 7]] * 3), jnp.array([0, 1, -1]), jnp.array([5] * 3))
    assert np.asarray(r).tolist() == pytest.approx([-3.0, -7.0, 6 * FLOOR])
    r = qa_reward(log_lik, jnp.array([[3, 7]]), jnp.array([-1]), jnp.array([5]),
                  RewardConfig(format_penalty=FLOOR))
    assert float(r[0]) == pytest.approx(FLOOR)


def test_bad_shapes_raise():
    with pytest.raises(ValueError, match="log_lik"):
        elbo_reward(jnp.zeros(56), jnp.zeros((1, 2)), jnp.zeros((1, 2)), jnp.ones(1, bool), 1)
    with pytest.raises(ValueError, match="floor"):
        RewardConfig(q_floor=0.0)
