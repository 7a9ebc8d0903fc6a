import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxtom.gridworld import env, reference
from jaxtom.gridworld.planner import cell_of, helper_logits
from jaxtom.gridworld.types import PICK, PUT, EnvParams, goal_pairs

from .conftest import helper_policy_tol, human_policy_tol, random_walk, unbatch

transition = jax.jit(env.transition, static_argnums=3)
human_log_probs = jax.jit(env.human_action_log_probs, static_argnums=1)


def assert_same_state(state, ref):
    assert tuple(np.asarray(state.human_pos)) == ref.human_pos
    assert tuple(np.asarray(state.helper_pos)) == ref.helper_pos
    assert [tuple(p) for p in np.asarray(state.obj_pos).tolist()] == [tuple(p) for p in ref.obj_pos]
    assert int(state.human_holding) == ref.human_holding
    assert int(state.helper_holding) == ref.helper_holding
    assert int(state.time) == ref.time
    assert bool(state.done) == ref.done


def test_same_key_same_episode(params):
    reset = jax.jit(env.reset, static_argnums=1)
    _, a = reset(jax.random.key(3), params)
    _, b = reset(jax.random.key(3), params)
    _, c = reset(jax.random.key(4), params)
    chex.assert_trees_all_equal(a, b)
    assert not np.array_equal(a.obj_pos, c.obj_pos)


def test_reset_respects_placement_rules(states, params):
    for i in range(len(states.time)):
        s = unbatch(states, i)
        pos = np.asarray(s.obj_pos)
        walls = np.asarray(s.layout.walls)
        assert not walls[pos[:, 1], pos[:, 0]].any()
        gaps = np.abs(pos[:, None] - pos[None]).sum(-1) + 100 * np.eye(len(pos))
        assert gaps.min() > 1
        assert len({tuple(p) for p in pos.tolist()} | {tuple(np.asarray(s.human_pos))}) == 9
        labels = set(zip(np.asarray(s.obj_color).tolist(), np.asarray(s.obj_shape).tolist()))
        assert len(labels) == params.num_objects
        o1, o2 = np.asarray(s.goal)
        assert o1 != o2
        d = np.asarray(s.layout.dist)
        start = int(cell_of(s.human_pos, 10))
        d1, d2 = d[start, int(cell_of(s.obj_pos[o1], 10))], d[start, int(cell_of(s.obj_pos[o2], 10))]
        assert d1 < d2 or (d1 == d2 and o1 < o2), "object1 is the goal object nearer the start"


def check_human_policy(state, ref, params):
    """The float32 policy within the float32 bound of the float64 reference
    (`human_policy_tol`); returns whether the policy at twice the temperature (a logit scale
    off by 2) is outside it."""
    tol = human_policy_tol(params)
    got = np.exp(np.asarray(human_log_probs(state, params)))
    np.testing.assert_allclose(got, reference.human_policy(ref, ref.goal, params), rtol=0,
                               atol=tol)
    hotter = reference.human_policy(ref, ref.goal, params.replace(human_tau=2 * params.human_tau))
    return np.abs(got - hotter).max() > tol


def test_transition_matches_reference(states, params):
    caught = []
    for i in range(6):
        for state, ref, a_h, a_r in random_walk(params, unbatch(states, i), 60, seed=i):
            assert_same_state(state, ref)
            caught.append(check_human_policy(state, ref, params))
    # forced picks, puts and pauses and near-certain moves are alike at either temperature
    assert np.mean(caught) > 0.1, "the tolerance should tell tau from 2 tau"


def test_human_policy_matches_reference_with_randomness(states):
    params = EnvParams(random_prob=0.15)
    caught = [check_human_policy(state, ref, params)
              for state, ref, *_ in random_walk(params, unbatch(states, 7), 40, seed=7)]
    assert np.mean(caught) > 0.1, "the tolerance should tell tau from 2 tau"


def test_helper_policy_matches_reference(states, params):
    rng = np.random.default_rng(0)
    goals_all = goal_pairs(8)

    @jax.jit
    def probs_of(state, goals, probs):
        view = env.scene_view(state, params)
        logits = helper_logits(view, cell_of(state.helper_pos, 10), state.helper_holding,
                               cell_of(state.human_pos, 10), state.human_holding, goals, probs, params)
        return jax.nn.softmax(logits)

    checked_pick = checked_put = 0
    tol = helper_policy_tol(params, 3)
    caught = []
    for i in range(8):
        for state, ref, *_ in random_walk(params, unbatch(states, i), 50, seed=100 + i):
            chosen = rng.choice(len(goals_all), 3, replace=False)
            goals, probs = goals_all[chosen], rng.dirichlet(np.ones(3))
            expected = reference.helper_policy(ref, [tuple(g) for g in goals], probs, params)
            got = np.asarray(probs_of(state, jnp.asarray(goals), jnp.asarray(probs, jnp.float32)))
            np.testing.assert_allclose(got, expected, rtol=0, atol=tol)
            # the same goals with their weights rotated: a belief mixed up between hypotheses
            wrong = reference.helper_policy(ref, [tuple(g) for g in goals], probs[[1, 2, 0]],
                                            params)
            caught.append(np.abs(got - wrong).max() > tol)
            checked_pick += expected[PICK] > 0
            checked_put += expected[PUT] > 0
    assert checked_pick > 0 and checked_put > 0, "walks should reach pick and put states"
    assert np.mean(caught) > 0.5, "the tolerance should tell the belief from a mixed-up one"


def test_done_episode_is_frozen(params):
    _, state = env.reset(jax.random.key(0), params)
    state = state.replace(done=jnp.array(True))
    after = transition(state, 1, 1, params)
    chex.assert_trees_all_equal(after, state)


def test_step_traces_once(params):
    _, state = env.reset(jax.random.key(0), params)

    @jax.jit
    @chex.assert_max_traces(n=1)
    def step(key, state, action):
        return env.step(key, state, action, params)

    for t in range(5):
        _, state, reward, done, info = step(jax.random.key(t), state, jnp.int32(t % 7))
    assert reward.dtype == jnp.float32 and info["human_action"].shape == ()


def test_state_from_ascii_and_task_completion(params):
    text = """
        . . . . . . . . . .
        . 2 . 3 . 4 . 5 . .
        . . . . . . . . . .
        . 6 . . . . . 7 . .
        . . . . . . . . . .
        . . . . . . . . . .
        . . . . . . . . . .
        . . . . . . . . . .
        . H 0 . 1 . . . . .
        P . . . . . . . . .
    """
    state = env.state_from_ascii(jax.random.key(0), text, params, goal=(1, 0))
    assert np.asarray(state.goal).tolist() == [0, 1], "object 0 is nearer the human"
    # walk right onto 0, pick, move right (toward 1), pause... put next to 1
    for action in [4, PICK]:
        state = transition(state, action, 0, params)
    assert int(state.human_holding) == 0
    state = transition(state, 4, 0, params)  # carry to (3, 1): adjacent to object 1 at (4, 1)
    assert np.asarray(state.obj_pos[0]).tolist() == [3, 1]
    state = transition(state, PUT, 0, params)
    assert bool(state.done) and int(state.time) == 4


@pytest.mark.parametrize("goal, message", [((0, 8), "unknown object 8"), ((3, 3), "must differ"),
                                           ((1, 2, 3), "two object ids")])
def test_bad_goals_are_rejected(params, goal, message):
    text = "\n".join(["H P . . . . . . . .", "0 . 1 . 2 . 3 . . .", ". . . . . . . . . .",
                      "4 . 5 . 6 . 7 . . ."] + [". . . . . . . . . ."] * 6)
    with pytest.raises(ValueError, match=message):
        env.state_from_ascii(jax.random.key(0), text, params, goal=goal)


def test_bad_sizes_and_actions_are_rejected(params):
    with pytest.raises(ValueError, match="layout is 3x3"):
        env.state_from_ascii(jax.random.key(0), "H P 0\n1 . .\n. . .", params)
    with pytest.raises(ValueError, match="action id 9 out of range"):
        env.validate_action(9)
    _, state = env.reset(jax.random.key(0), params)
    with pytest.raises(ValueError, match="out of range"):
        env.step(jax.random.key(0), state, 7, params)
