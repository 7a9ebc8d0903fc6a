import jax
import numpy as np
import pytest

from jaxtom.gridworld import reference
from jaxtom.gridworld.inference import goal_log_likelihoods, goal_posterior
from jaxtom.gridworld.simulation import rollout_batch
from jaxtom.gridworld.types import EnvParams
from tests.tolerance import EPS32, float32_tol


def reference_states(traj, i, params):
    """Rebuild reference states from the recorded trajectory of episode `i`."""
    t_max = int(np.asarray(traj.valid[i]).sum())
    walls = np.asarray(traj.layout.walls[i])
    out = []
    for t in range(t_max):
        out.append(reference.RefState(
            walls=walls, obj_pos=[tuple(p) for p in np.asarray(traj.obj_pos[i, t]).tolist()],
            human_pos=tuple(np.asarray(traj.human_pos[i, t]).tolist()),
            helper_pos=(0, 0), human_holding=int(traj.human_holding[i, t]),
            helper_holding=int(traj.helper_holding[i, t]),
            human_last_action=int(traj.human_last_action[i, t]), helper_stays=0, goal=(0, 1)))
    return out, np.asarray(traj.action[i, :t_max])


@pytest.mark.parametrize("random_prob, helper", [(0.0, "oracle"), (0.15, "random")])
def test_likelihoods_match_reference(states, random_prob, helper):
    params = EnvParams(random_prob=random_prob)
    batch = jax.tree.map(lambda x: x[:3], states)
    _, traj, _, _ = rollout_batch(jax.random.split(jax.random.key(5), 3), batch, params, helper)
    got = np.asarray(jax.jit(goal_log_likelihoods, static_argnums=1)(traj, params))
    assert got.shape == (3, params.max_steps, 56)
    for i in range(3):
        ref_states, actions = reference_states(traj, i, params)
        expected = reference.step_log_likelihoods(ref_states, actions, params)
        # each entry is a float64 value (the likelihood table) rounded once to float32: within
        # EPS32 / 2 of it, relative; the other half covers the float64 reference's own error
        # (~1e-16 absolute, on values down to ~1e-8), exact zeros stay exact
        np.testing.assert_allclose(got[i, : len(actions)], expected, rtol=EPS32, atol=0)
        # the likelihoods of the next step in place of this one's are caught
        assert not np.allclose(got[i, 1: len(actions)], expected[:-1], rtol=EPS32, atol=0)
        assert (got[i, len(actions):] == 0).all(), "steps after the end carry no evidence"


def test_posterior_is_a_finite_distribution_and_pause_is_informative(states, params):
    batch = jax.tree.map(lambda x: x[:8], states)
    _, traj, _, _ = rollout_batch(jax.random.split(jax.random.key(6), 8), batch, params, "stay")
    post = np.asarray(goal_posterior(traj, params))
    assert np.isfinite(post).all()
    # the softmax's G - 1 adds of its normaliser and a divide, u = EPS32 / 2 each (exp's
    # errors cancel in the ratio), summed here in float64
    G = params.num_goals
    np.testing.assert_allclose(post.astype(np.float64).sum(-1), 1.0, rtol=0,
                               atol=float32_tol(1.0, G))
    ll = np.asarray(goal_log_likelihoods(traj, params))
    goals = np.asarray(batch.goal)
    true = goals[:, 0] * 7 + goals[:, 1] - (goals[:, 1] > goals[:, 0])
    # the true goal never hits the floor: every action of the human, pauses included, is
    # explained by its own goal (the public code floors every pause for every goal)
    true_ll = ll[np.arange(8), :, true]
    assert (true_ll > np.log(params.likelihood_floor) + 1).all()


def test_prior_changes_the_posterior_and_is_validated(states, params):
    _, traj, _, _ = rollout_batch(jax.random.split(jax.random.key(7), 1),
                                  jax.tree.map(lambda x: x[:1], states), params, "stay")
    G = params.num_goals
    prior = np.full(G, 1.0) / G
    uniform = np.asarray(goal_posterior(traj, params))
    # Both are softmaxes over G goals of the same float32 cumulative log-likelihoods, one with
    # log(1/G) added first. The add rounds each input x_i by u |x_i|, which moves a
    # probability by at most u (2 |x_max| + 1 + G / e) (p_i <= e^-(x_max - x_i) and
    # t e^-t <= 1/e); each softmax rounds x - x_max, exp, G - 1 adds and a divide: at most
    # (G + 4 + G / e) u. In EPS32 = 2u units: |x_max| + 2 G covers both.
    x_max = np.cumsum(np.asarray(goal_log_likelihoods(traj, params), np.float64), -2).max(-1)
    x_max = np.abs(x_max + np.log(1 / G)).max()
    tol = float32_tol(x_max, 1) + float32_tol(1.0, 2 * G)
    np.testing.assert_allclose(np.asarray(goal_posterior(traj, params, prior)), uniform,
                               rtol=0, atol=tol)
    skewed = prior.copy()
    skewed[0] *= 100
    skewed /= skewed.sum()
    assert np.abs(np.asarray(goal_posterior(traj, params, skewed)) - uniform).max() > tol
    with pytest.raises(ValueError, match="expected 56"):
        goal_posterior(traj, params, np.ones(28) / 28)


def test_host_trajectories_with_a_remainder_chunk_match_device_ones(states, params):
    """NumPy trajectories (as `jax.device_get` returns them) whose episode count leaves a
    remainder chunk give the same likelihoods as device arrays (it used to crash there)."""
    from jaxtom.gridworld.inference import EPISODE_CHUNK
    n = EPISODE_CHUNK + 1
    batch = jax.tree.map(lambda x: x[:3], states)
    _, traj, _, _ = rollout_batch(jax.random.split(jax.random.key(7), 3), batch, params, "stay")
    traj = jax.tree.map(lambda x: x[np.arange(n) % 3], traj)
    on_device = np.asarray(goal_log_likelihoods(traj, params))
    on_host = np.asarray(goal_log_likelihoods(jax.device_get(traj), params))
    assert on_host.shape == (n, params.max_steps, 56)
    np.testing.assert_array_equal(on_host, on_device)
