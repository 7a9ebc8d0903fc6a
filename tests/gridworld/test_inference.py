import jax
import numpy as np
import pytest

from jaxtom.gridworld import reference
from jaxtom.gridworld.inference import goal_log_likelihoods, goal_posterior
from jaxtom.gridworld.simulation import rollout_batch
from jaxtom.gridworld.types import EnvParams



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
        np.testing.assert_allclose(got[i, : len(actions)], expected, atol=1e-5)
        assert (got[i, len(actions):] == 0).all(), "steps after the end carry no evidence"


def test_posterior_is_a_finite_distribution_and_pause_is_informative(states, params):
    batch = jax.tree.map(lambda x: x[:8], states)
    _, traj, _, _ = rollout_batch(jax.random.split(jax.random.key(6), 8), batch, params, "stay")
    post = np.asarray(goal_posterior(traj, params))
    assert np.isfinite(post).all()
    np.testing.assert_allclose(post.sum(-1), 1.0, atol=1e-5)
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
    prior = np.full(56, 1.0) / 56
    uniform = np.asarray(goal_posterior(traj, params))
    np.testing.assert_allclose(np.asarray(goal_posterior(traj, params, prior)), uniform, atol=1e-6)
    skewed = prior.copy()
    skewed[0] *= 100
    skewed /= skewed.sum()
    assert not np.allclose(np.asarray(goal_posterior(traj, params, skewed)), uniform)
    with pytest.raises(ValueError, match="expected 56"):
        goal_posterior(traj, params, np.ones(28) / 28)
