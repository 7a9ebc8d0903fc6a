import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxtom.gridworld import likelihood
from jaxtom.gridworld.inference import goal_log_likelihoods
from jaxtom.gridworld.planner import SceneView, cell_of, human_action_log_prob, move_log_probs
from jaxtom.gridworld.simulation import rollout_batch
from jaxtom.gridworld.types import NUM_ACTIONS, EnvParams, goal_pairs

from .conftest import human_policy_tol, table_rounding_tol


def test_table_rows_are_the_closed_form_boltzmann_policy():
    params = EnvParams()
    cap = likelihood.steps_cap(params)
    table = likelihood.log_likelihood_table(params).reshape(-1, cap + 1)
    # float32 move_log_probs against the float64-built table stored in float32
    tol = human_policy_tol(params) + table_rounding_tol(params)
    one_step_more = []
    for fewest in (0, 3, 40, 2 * params.num_cells - 1):
        for worse in ([0, 0, 0, 0], [0, 1, 1, 2], [1, 0, 2, 2], [2, 1, 0, 1], [0, 2, 2, 2]):
            steps = jnp.asarray(np.array(worse) + fewest, jnp.float32)
            n1, n2 = worse.count(1), worse.count(2)
            expected = np.maximum(np.asarray(move_log_probs(steps, params)), np.log(1e-12))
            for move, d in enumerate(worse):
                row = likelihood.FIRST_PATTERN_ROW + n1 * 12 + n2 * 3 + d
                np.testing.assert_allclose(table[row, fewest], expected[move], rtol=0, atol=tol)
                if d and fewest < 2 * params.num_cells - 1:  # a non-best move, m one too many
                    one_step_more.append(abs(table[row, fewest + 1] - expected[move]) > tol)
    assert np.mean(one_step_more) > 0.9, "the tolerance should tell m from m + 1"
    # unreachable targets: every move is alike, exactly log(1/4) rounded once to float32
    assert (table[likelihood.FIRST_PATTERN_ROW:, cap][[0, 12 * 3 + 1]]
            == np.float32(np.log(0.25))).all()
    assert (table[likelihood.ROW_ZERO] == 0).all()
    assert (table[likelihood.ROW_FLOOR] == np.float32(np.log(1e-12))).all()


def test_materialize_is_the_identity():
    x = jnp.arange(-5, 7, dtype=jnp.int32).reshape(3, 4)
    np.testing.assert_array_equal(jax.jit(likelihood.materialize)(x), x)


@pytest.mark.parametrize("random_prob", [0.0, 0.15])
def test_every_action_matches_the_per_goal_planner(states, random_prob):
    """All seven actions (not only the observed one) in states from a rollout: covers forced
    picks and puts, pauses, impossible goals and moves a goal forbids."""
    params = EnvParams(random_prob=random_prob)
    batch = jax.tree.map(lambda x: x[:2], states)
    _, traj, _, _ = rollout_batch(jax.random.split(jax.random.key(9), 2), batch, params, "random")
    goals = jnp.asarray(goal_pairs(params.num_objects))
    steps = np.flatnonzero(np.asarray(traj.valid).reshape(-1))[:48]
    flat = {name: getattr(traj, name).reshape((-1,) + getattr(traj, name).shape[2:])[steps]
            for name in ("human_pos", "human_holding", "human_last_action", "helper_holding",
                         "obj_pos")}
    layout_of = jnp.asarray(steps // traj.valid.shape[1], jnp.int32)

    @jax.jit
    def both(action):
        fast = likelihood.steps_goal_log_likelihoods(
            traj.layout.dist.reshape(-1), likelihood.open_moves(traj.layout.next_cell).reshape(-1),
            layout_of, flat["human_pos"], flat["human_holding"], flat["human_last_action"],
            flat["helper_holding"], flat["obj_pos"], action, jnp.ones(len(steps), bool), params)

        def slow(i, human_pos, holding, last, helper, obj_pos, a):
            layout = jax.tree.map(lambda x: x[i], traj.layout)
            view = SceneView(layout, obj_pos, holding, helper, params.width)
            logp = human_action_log_prob(view, cell_of(human_pos, params.width), holding, last,
                                         a, goals[:, 0], goals[:, 1], params)
            return jnp.maximum(logp, jnp.log(params.likelihood_floor))

        return fast, jax.vmap(slow)(layout_of, flat["human_pos"], flat["human_holding"],
                                    flat["human_last_action"], flat["helper_holding"],
                                    flat["obj_pos"], action)

    # the table (float64, rounded once to float32) against the float32 planner
    tol = human_policy_tol(params) + table_rounding_tol(params)
    for a in range(NUM_ACTIONS):
        fast, slow = both(jnp.full(len(steps), a, jnp.int32))
        np.testing.assert_allclose(fast, slow, rtol=0, atol=tol, err_msg=f"action {a}")
    # a step off by one (each step scored with the next step's state) is caught
    fast, slow = both(jnp.asarray(traj.action.reshape(-1)[steps]))
    assert (np.abs(np.asarray(fast)[1:] - np.asarray(slow)[:-1]).max(-1) > tol).mean() > 0.9


def test_batches_that_are_not_a_whole_number_of_chunks(states, params):
    """35 episodes: one chunk of 32 and a remainder of 3, each equal to the episode alone."""
    batch = jax.tree.map(lambda x: x[jnp.arange(35) % 32], states)
    _, traj, _, _ = rollout_batch(jax.random.split(jax.random.key(3), 35), batch, params, "stay")
    together = np.asarray(jax.jit(goal_log_likelihoods, static_argnums=1)(traj, params))
    alone = jax.jit(goal_log_likelihoods, static_argnums=1)
    for i in (0, 31, 32, 34):
        np.testing.assert_array_equal(
            together[i], np.asarray(alone(jax.tree.map(lambda x: x[i], traj), params)))
