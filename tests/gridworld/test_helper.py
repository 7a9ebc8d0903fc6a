"""The helper's rules (jaxtom.gridworld.helper): a constructed scene where each rule must
fire, and agreement with the NumPy reference's helper along random walks."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxtom.gridworld import env, helper, reference
from jaxtom.gridworld.types import MOVES, PICK, PUT, STAY, UP, EnvParams, goal_pairs

from .conftest import helper_policy_tol, random_walk, unbatch

# Goal (0, 1): the human (H) picks object 0 first; the helper's object is 1, at (7, 1).
SCENE = """
    . . . . . . . . . .
    . 2 . 3 . 4 . 5 . .
    . . . . . . . . . .
    . 6 . . . . . 7 . .
    . . . . . . . . . .
    . . . . . . . . . .
    . . . . . . . . . .
    . . . . . . . . . .
    . 0 . . . . . 1 . .
    H . . . . . . . . P
"""
ORACLE = (jnp.array([[0, 1]], jnp.int32), jnp.ones(1, jnp.float32))
KEYS = [jax.random.key(i) for i in range(12)]

act = jax.jit(helper.act, static_argnames="params")
policy_logits = jax.jit(helper.policy_logits, static_argnames="params")
transition = jax.jit(env.transition, static_argnums=3)


@pytest.fixture(scope="module")
def scene(params):
    return env.state_from_ascii(jax.random.key(0), SCENE, params, goal=(0, 1))


def place(state, human=None, helper_at=None, holding=None, **changes):
    """The scene with agents moved; `holding` puts that object in the helper's hands."""
    if human is not None:
        state = state.replace(human_pos=jnp.array(human, jnp.int32))
    if helper_at is not None:
        state = state.replace(helper_pos=jnp.array(helper_at, jnp.int32))
    if holding is not None:
        state = state.replace(helper_holding=jnp.int32(holding),
                              obj_pos=state.obj_pos.at[holding].set(state.helper_pos))
    return state.replace(**{k: jnp.asarray(v) for k, v in changes.items()})


def actions(state, params, memory=None, belief=ORACLE):
    memory = helper.init_memory(1, params) if memory is None else memory
    return [int(act(k, state, memory, *belief, params).action) for k in KEYS]


def test_no_pick_while_the_human_is_within_three_steps_of_the_object(scene, params):
    near = place(scene, human=(4, 1), helper_at=(7, 1))  # 3 path steps from object 1
    far = place(scene, human=(3, 1), helper_at=(7, 1))  # 4
    none = jnp.zeros(8, bool)
    assert float(policy_logits(near, *ORACLE, none, params)[PICK]) == -np.inf
    assert PICK not in actions(near, params)
    assert set(actions(far, params)) == {PICK}


def test_holding_it_puts_down_and_gives_up_with_the_human_one_step_away(scene, params):
    state = place(scene, human=(5, 4), helper_at=(5, 5), holding=1)
    decision = act(KEYS[0], state, helper.init_memory(1, params), *ORACLE, params)
    assert set(actions(state, params)) == {PUT}
    assert np.asarray(decision.memory.avoid).tolist() == [False, True] + [False] * 6
    # Given up: standing on object 1 later, with the human far, it does not pick it again.
    later = place(scene, human=(0, 0), helper_at=(7, 1))
    assert set(actions(later, params)) == {PICK}
    assert PICK not in actions(later, params, decision.memory)
    # A ground object under the helper blocks the put, so the rule does not fire there.
    blocked = place(scene, human=(7, 5), helper_at=(7, 6), holding=1)
    assert PUT not in actions(blocked, params)
    assert PUT not in actions(state, params.replace(put_distance=0))


def test_holding_it_stays_with_the_human_two_steps_away(scene, params):
    state = place(scene, human=(5, 3), helper_at=(5, 5), holding=1, helper_stays=5)
    assert set(actions(state, params)) == {STAY}, "a rule stay is not broken as a deadlock"
    assert STAY not in actions(state, params.replace(wait_distance=0))


def test_a_stay_after_two_stays_becomes_a_random_move(scene, params):
    # On its object with the human 2 steps from it: no pick, and staying is best by far.
    state = place(scene, human=(5, 1), helper_at=(7, 1))
    probs = jax.nn.softmax(policy_logits(state, *ORACLE, jnp.zeros(8, bool), params))
    assert float(probs[STAY]) > 0.99
    assert actions(state, params).count(STAY) >= len(KEYS) - 1
    assert set(actions(place(state, helper_stays=2), params)) <= set(MOVES)


def test_the_belief_is_kept_after_a_human_pause(scene, params):
    old = helper.init_memory(1, params).replace(goals=jnp.array([[2, 3]], jnp.int32),
                                                probs=jnp.ones(1))

    def belief_after(params, **changes):
        state = place(scene, time=5, **changes)
        return np.asarray(act(KEYS[0], state, old, *ORACLE, params).memory.goals).tolist()

    assert belief_after(params, human_last_action=STAY) == [[2, 3]]
    assert belief_after(params, human_last_action=UP) == [[0, 1]]
    assert belief_after(params, human_last_action=PICK) == [[0, 1]]
    assert belief_after(params.replace(refresh_on_pause=True), human_last_action=STAY) == [[0, 1]]
    assert np.asarray(act(KEYS[0], scene, old, *ORACLE, params).memory.goals).tolist() == [[0, 1]]


def test_teleport_after_three_refreshes_on_the_same_goal(scene, params):
    params = params.replace(teleport_after=3)
    # The human carries object 0 and just moved; the helper is far from object 1.
    state = place(scene, human=(2, 1), helper_at=(9, 9), human_holding=0, time=6,
                  human_last_action=UP)
    state = state.replace(obj_pos=state.obj_pos.at[0].set(state.human_pos))
    streak = helper.init_memory(1, params).replace(
        goals=ORACLE[0], probs=ORACLE[1], top_goal=jnp.array([0, 1], jnp.int32),
        top_count=jnp.int32(2))
    decision = act(KEYS[0], state, streak, *ORACLE, params)
    assert int(decision.action) == PICK and int(decision.teleport) == 1
    assert np.asarray(decision.memory.fixed_goal).tolist() == [0, 1]
    after = transition(state, STAY, decision.action, params, decision.teleport)
    assert np.asarray(after.helper_pos).tolist() == [7, 1] and int(after.helper_holding) == 1
    # Committed: a later belief on offer does not change the goal it acts on.
    other = (jnp.array([[4, 5]], jnp.int32), jnp.ones(1))
    later = act(KEYS[1], state, decision.memory, *other, params).memory
    assert np.asarray(helper.belief_in_use(later)[0]).tolist() == [[0, 1]]
    # Not yet: a shorter streak, a pause (no refresh), or the rule off.
    short = streak.replace(top_count=jnp.int32(1))
    assert int(act(KEYS[0], state, short, *ORACLE, params).teleport) == -1
    paused = place(state, human_last_action=STAY)
    assert int(act(KEYS[0], paused, streak, *ORACLE, params).teleport) == -1
    off = params.replace(teleport_after=0)
    assert int(act(KEYS[0], state, streak, *ORACLE, off).teleport) == -1
    # The human holding the goal's second object sends the helper to the first.
    swapped = place(state, human_holding=1).replace(
        obj_pos=scene.obj_pos.at[1].set(state.human_pos))
    decision = act(KEYS[0], swapped, streak, *ORACLE, params)
    assert int(decision.teleport) == 0
    assert np.asarray(decision.memory.fixed_goal).tolist() == [1, 0]


def _memory_pair(rng, state, params):
    """A random helper memory, as a JAX pytree and as a reference `Helper` with the same
    contents; the belief often holds a goal with the human's object, so commits happen."""
    goals_all = goal_pairs(8)
    goals = goals_all[rng.choice(len(goals_all), 3, replace=False)]
    human = int(state.human_holding)
    if human >= 0 and rng.random() < 0.5:
        goals[0] = (human, (human + 1 + rng.integers(7)) % 8)
    probs = np.sort(rng.dirichlet(np.ones(3)).astype(np.float32))[::-1].copy()  # goals[0] tops
    avoid = rng.random(8) < 0.2
    top = goals[int(np.argmax(probs))] if rng.random() < 0.5 else goals_all[rng.integers(56)]
    top = top if rng.random() < 0.8 else np.array([-1, -1])
    fixed = goals_all[rng.integers(56)] if rng.random() < 0.15 else np.array([-1, -1])
    count = int(rng.integers(0, 3))
    memory = helper.HelperMemory(
        goals=jnp.asarray(goals, jnp.int32), probs=jnp.asarray(probs), avoid=jnp.asarray(avoid),
        top_goal=jnp.asarray(top, jnp.int32), top_count=jnp.int32(count),
        fixed_goal=jnp.asarray(fixed, jnp.int32))
    ref = reference.Helper(params)
    ref.goals, ref.probs = [tuple(map(int, g)) for g in goals], probs.tolist()
    ref.avoid = set(np.flatnonzero(avoid).tolist())
    ref.top_goal = None if top[0] < 0 else tuple(map(int, top))
    ref.top_count = count
    ref.fixed_goal = None if fixed[0] < 0 else tuple(map(int, fixed))
    return memory, ref


def _near_the_human(rng, state):
    """Often puts an object in the human's hands (for the teleport rule) and moves the helper
    next to the human (path distance 1-3) with another object in its hands, where the make-way
    rules apply."""
    if int(state.human_holding) < 0 and int(state.helper_holding) < 0 and rng.random() < 0.3:
        obj = int(rng.integers(8))
        state = state.replace(human_holding=jnp.int32(obj),
                              obj_pos=state.obj_pos.at[obj].set(state.human_pos))
    if rng.random() < 0.5 or int(state.helper_holding) >= 0:
        return state
    walls, dist = np.asarray(state.layout.walls), np.asarray(state.layout.dist)
    human = int(state.human_pos[1]) * 10 + int(state.human_pos[0])
    cells = np.flatnonzero((dist[human] >= 1) & (dist[human] <= 3) & ~walls.reshape(-1))
    cell = int(rng.choice(cells))
    ground = [k for k in range(8) if k != int(state.human_holding)]
    obj = int(rng.choice(ground))
    pos = jnp.array([cell % 10, cell // 10], jnp.int32)
    return state.replace(helper_pos=pos, helper_holding=jnp.int32(obj),
                         obj_pos=state.obj_pos.at[obj].set(pos))


def test_helper_matches_reference_along_random_walks(states):
    params = EnvParams(teleport_after=2)
    rng = np.random.default_rng(0)
    goals_all = goal_pairs(8)

    @jax.jit
    def run(key, state, memory, goals, probs, refresh):
        decision = helper.act(key, state, memory, goals, probs, params, refresh)
        fires, rule = helper.yield_rule(state, params)
        use = helper.belief_in_use(decision.memory)
        dist = jax.nn.softmax(helper.policy_logits(state, *use, decision.memory.avoid, params))
        return decision, fires, rule, dist

    seen = {"put": 0, "wait": 0, "teleport": 0, "commit": 0, "policy": 0}
    for i in range(8):
        for step, (state, *_) in enumerate(
                random_walk(params, unbatch(states, i), 50, seed=200 + i)):
            state = _near_the_human(rng, state.replace(time=jnp.int32(step)))
            ref_state = reference.from_env_state(state)
            memory, ref = _memory_pair(rng, state, params)
            offer = goals_all[rng.choice(56, 3, replace=False)]
            offer_p = rng.dirichlet(np.ones(3)).astype(np.float32)
            refresh = bool(rng.random() < 0.7)
            decision, fires, rule, dist = run(jax.random.key(step), state, memory,
                                              jnp.asarray(offer, jnp.int32), jnp.asarray(offer_p),
                                              refresh)
            expected_rule, expected_teleport = ref.decide(ref_state, offer, offer_p, refresh)
            assert (int(rule) if bool(fires) else None) == expected_rule
            assert int(decision.teleport) == expected_teleport
            fixed = np.asarray(decision.memory.fixed_goal).tolist()
            assert fixed == (list(ref.fixed_goal) if ref.fixed_goal else [-1, -1])
            top = np.asarray(decision.memory.top_goal).tolist()
            assert top == (list(ref.top_goal) if ref.top_goal else [-1, -1])
            assert int(decision.memory.top_count) == ref.top_count
            assert set(np.flatnonzero(np.asarray(decision.memory.avoid)).tolist()) == ref.avoid
            goals, probs = ref.belief()
            np.testing.assert_allclose(np.asarray(dist), reference.helper_policy(
                ref_state, goals, probs, params, avoid=ref.avoid), rtol=0,
                atol=helper_policy_tol(params, len(offer)))
            if expected_teleport >= 0:
                assert int(decision.action) == PICK
            elif expected_rule is not None:
                assert int(decision.action) == expected_rule
            seen["put"] += expected_rule == PUT
            seen["wait"] += expected_rule == STAY
            seen["teleport"] += expected_teleport >= 0
            seen["commit"] += ref.fixed_goal is not None and int(memory.fixed_goal[0]) < 0
            seen["policy"] += expected_rule is None and expected_teleport < 0
    assert all(seen.values()), f"every rule should fire on the walks: {seen}"
