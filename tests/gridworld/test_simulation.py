import chex
import jax
import numpy as np

from jaxtom.gridworld import simulation as simulation
from jaxtom.gridworld.types import EnvParams

from .conftest import unbatch


def test_rollout_traces_once(states, params):
    @jax.jit
    @chex.assert_max_traces(n=1)
    def run(key, state):
        return simulation.rollout.__wrapped__(key, state, params, "oracle", 30)

    for i in range(3):
        final, traj, helper_actions, _ = run(jax.random.key(i), unbatch(states, i))
    assert traj.action.shape == (30,) and helper_actions.shape == (30,)


def test_rollout_is_deterministic_and_done_mask_is_consistent(states, params):
    keys = jax.random.split(jax.random.key(0), 4)
    batch = jax.tree.map(lambda x: x[:4], states)
    a = simulation.rollout_batch(keys, batch, params, "bip")
    b = simulation.rollout_batch(keys, batch, params, "bip")
    chex.assert_trees_all_equal(a, b)
    final, traj, _, _ = a
    valid = np.asarray(traj.valid)
    # valid is a prefix whose length is the completion time
    np.testing.assert_array_equal(valid.sum(1), np.asarray(final.time))
    assert (np.diff(valid.astype(int), axis=1) <= 0).all()


def test_speedup_ordering_over_three_seeds():
    params = EnvParams(random_prob=0.15)
    result = simulation.simulate(jax.random.key(0), params, num_episodes=96, seeds=(10, 20, 30))
    assert result["stay"]["mean"] == 0.0 and np.all(result["stay"]["speedup"] == 0.0)
    oracle, bip = result["oracle"]["mean"], result["bip"]["mean"]
    assert oracle >= bip > 0.0, (oracle, bip)
    assert bip > 2 * result["bip"]["sem"], "BIP helps by more than noise"
    assert abs(result["random"]["mean"]) < oracle
    assert 0.0 < result["true_goal_posterior"] < 1.0


def test_unknown_helper_is_rejected(states, params):
    import pytest
    with pytest.raises(ValueError, match="unknown helper 'smart'"):
        simulation.simulate(jax.random.key(0), params, helpers=("smart",), num_episodes=2)


def test_teleport_rule_is_a_params_switch(states, params):
    """The oracle's helper jumps (moves more than one cell in a step) only with the rule on."""
    keys = jax.random.split(jax.random.key(0), 8)
    batch = jax.tree.map(lambda x: x[:8], states)

    def jumps(params):
        final, traj, _, _ = simulation.rollout_batch(keys, batch, params, "oracle")
        path = np.concatenate([np.asarray(traj.helper_pos),
                               np.asarray(final.helper_pos)[:, None]], axis=1)
        step = np.abs(np.diff(path, axis=1)).sum(-1)
        return int((step > 1).sum())

    assert jumps(params) == 0
    assert jumps(params.replace(teleport_after=3)) > 0
