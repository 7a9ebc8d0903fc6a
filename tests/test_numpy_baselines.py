"""The vectorised NumPy baselines of the gridworld benchmarks (`benchmarks/numpy_baselines.py`)
compute the same values as the scalar oracles (`jaxtom.gridworld.reference`,
`jaxtom.mindzero.reference`), so the benchmarks' ratios compare like with like. Episodes are
played by the reference itself (no JAX compilation), so this runs in a few seconds."""

import importlib.util
import math
import pathlib

import numpy as np
import pytest

from jaxtom.gridworld import reference
from jaxtom.gridworld.types import NUM_ACTIONS, PICK, EnvParams, goal_index
from jaxtom.mindzero.reference import elbo_reward_one

_PATH = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "numpy_baselines.py"
_SPEC = importlib.util.spec_from_file_location("numpy_baselines", _PATH)
nb = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(nb)

EPS64 = 2.0 ** -52
EPS32 = 2.0 ** -23


def likelihood_tol(params: EnvParams, eps: float) -> float:
    """Rounding bound of one step's log-likelihood: ~16 rounding steps on its path (gamma^s,
    the shift by the best move, exp, a sum of four, log, the difference, the random_prob
    mixture) on each side, at the magnitude each side works at. The oracle (float64) forms the
    logits q / tau, |q| / tau <= (c (1 + gamma) / (1 - gamma) + c) / tau (210 by default),
    before shifting them; the baseline (unit roundoff `eps`) forms the shifted logits
    directly, scale gamma^m (gamma^k - 1), k <= 2, at most scale (1 - gamma^2) (18.5)."""
    cost, gamma, tau = params.step_cost, params.gamma, params.human_tau
    oracle_logits = (cost * (1 + gamma) / (1 - gamma) + cost) / tau
    shifted_logits = cost * gamma / ((1 - gamma) * tau) * (1 - gamma ** 2)
    return 16 * (EPS64 * (oracle_logits + math.log(4)) + eps * (shifted_logits + math.log(4)))


def tables(walls):
    """The layout tables both sides share: all-pairs path lengths [C, C] (from the reference's
    BFS) and the cell each of stay/up/down/left/right reaches [C, 5]."""
    height, width = walls.shape
    cells = [(x, y) for y in range(height) for x in range(width)]
    dist = np.stack([reference.bfs(walls, c).reshape(-1) for c in cells]).astype(np.int16)
    reached = [[reference.neighbour(walls, c, a) for a in range(5)] for c in cells]
    next_cell = np.array([[y * width + x for x, y in row] for row in reached], np.int32)
    return dist, next_cell


def play(seed, params, steps):
    """One episode played by the reference: the human follows its policy for the true goal but
    takes a uniformly random action one step in five (so forbidden actions, floors and every
    branch occur), the helper acts at random, picking one step in three (so it holds objects
    too). Returns walls and per-step arrays."""
    rng = np.random.default_rng(seed)
    h, w, k = params.height, params.width, params.num_objects
    walls = np.zeros((h, w), bool)
    walls.reshape(-1)[rng.choice(h * w, 12, replace=False)] = True
    free = np.flatnonzero(~walls.reshape(-1))
    cells = [(int(c % w), int(c // w)) for c in rng.choice(free, k + 2, replace=False)]
    goal = tuple(int(g) for g in rng.choice(k, 2, replace=False))
    state = reference.RefState(walls=walls, obj_pos=cells[:k], human_pos=cells[k],
                               helper_pos=cells[k + 1], human_holding=-1, helper_holding=-1,
                               human_last_action=0, helper_stays=0, goal=goal)
    dist = reference.Distances(walls)
    states, actions = [], []
    for _ in range(steps):
        if state.done:
            break
        if rng.random() < 0.2:
            human = int(rng.integers(NUM_ACTIONS))
        else:
            human = reference.sample_action(
                rng, reference.human_policy(state, goal, params, dist))
        states.append(state)
        actions.append(human)
        helper = PICK if rng.random() < 1 / 3 else int(rng.integers(NUM_ACTIONS))
        state = reference.step(state, human, helper, params)
    arrays = {
        "human_pos": np.array([s.human_pos for s in states], np.int32),
        "human_holding": np.array([s.human_holding for s in states], np.int32),
        "human_last_action": np.array([s.human_last_action for s in states], np.int32),
        "helper_holding": np.array([s.helper_holding for s in states], np.int32),
        "obj_pos": np.array([s.obj_pos for s in states], np.int32),
        "action": np.array(actions, np.int32)}
    return walls, states, arrays


def baseline(walls, arrays, params, dtype=np.float64):
    dist, next_cell = tables(walls)
    return nb.goal_log_likelihoods(dist, next_cell, **arrays, params=params, dtype=dtype)


@pytest.mark.parametrize("random_prob", [0.0, 0.15])
def test_likelihoods_equal_the_scalar_oracle(random_prob):
    params = EnvParams(random_prob=random_prob, max_steps=40)
    seen = set()
    for seed in range(3):
        walls, states, arrays = play(seed, params, 40)
        want = reference.step_log_likelihoods(states, arrays["action"], params)
        got = baseline(walls, arrays, params)
        assert got.shape == want.shape == (len(states), params.num_goals)
        assert got.dtype == np.float64
        np.testing.assert_allclose(got, want, rtol=0, atol=likelihood_tol(params, EPS64))
        got32 = baseline(walls, arrays, params, np.float32)
        assert got32.dtype == np.float32
        np.testing.assert_allclose(got32, want, rtol=0, atol=likelihood_tol(params, EPS32))
        # the next step's likelihoods in place of this one's are caught
        assert not np.allclose(got[1:], want[:-1], rtol=0, atol=likelihood_tol(params, EPS32))
        seen |= {round(v, 6) for v in want.reshape(-1)}
    # the episodes cover floors, forced actions (log 1 or log(1 - p)) and Boltzmann moves
    floor = round(math.log(params.likelihood_floor), 6)
    assert floor in seen and round(math.log1p(-random_prob), 6) in seen and len(seen) > 20


@pytest.mark.parametrize("random_prob", [0.0, 0.15])
def test_table_variant_equals_the_scalar_oracle(random_prob):
    """`table=True` looks the values up in jaxtom's float32 table: equal to the oracle within
    float32 rounding of the table's entries, on every phase of the episodes."""
    params = EnvParams(random_prob=random_prob, max_steps=40)
    for seed in range(3):
        walls, states, arrays = play(seed, params, 40)
        want = reference.step_log_likelihoods(states, arrays["action"], params)
        dist, next_cell = tables(walls)
        got = nb.goal_log_likelihoods(dist, next_cell, **arrays, params=params,
                                      dtype=np.float32, table=True)
        assert got.shape == want.shape and got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=0, atol=likelihood_tol(params, EPS32))
        assert not np.allclose(got[1:], want[:-1], rtol=0, atol=likelihood_tol(params, EPS32))


def test_batched_episodes_equal_one_at_a_time():
    params = EnvParams(max_steps=12)
    played = [play(seed, params, 12) for seed in (10, 11, 12)]
    played = [p for p in played if len(p[1]) == 12][:2]
    assert len(played) == 2
    dist, next_cell = zip(*(tables(walls) for walls, _, _ in played))
    stacked = {key: np.stack([arrays[key] for _, _, arrays in played]) for key in played[0][2]}
    got = nb.goal_log_likelihoods(np.stack(dist), np.stack(next_cell), **stacked, params=params)
    for e, (walls, _, arrays) in enumerate(played):
        np.testing.assert_array_equal(got[e], baseline(walls, arrays, params))


def test_elbo_rewards_equal_the_per_sample_oracle():
    params = EnvParams(max_steps=30)
    played = [play(seed, params, 30) for seed in (20, 21)]
    lengths = [len(states) for _, states, _ in played]
    steps_max = max(lengths)
    per_step = np.zeros((2, steps_max, params.num_goals))
    valid = np.zeros((2, steps_max), bool)
    for e, (walls, _, arrays) in enumerate(played):
        per_step[e, : lengths[e]] = baseline(walls, arrays, params)
        valid[e, : lengths[e]] = True
    cumulative = nb.cumulative_log_likelihoods(per_step, valid)
    assert cumulative.shape == (2, steps_max + 1, params.num_goals)
    assert (cumulative[:, 0] == 0).all()

    rng = np.random.default_rng(0)
    B, N = 12, 3
    episode = rng.integers(0, 2, B)
    num_steps = np.array([rng.integers(0, lengths[e] + 1) for e in episode])
    goals = np.stack([rng.choice(params.num_goals, N, replace=False) for _ in range(B)])
    q = rng.dirichlet(np.ones(N), B)
    q[0, 2] = 0.0  # padding
    q[0] /= q[0].sum()
    ok = rng.random(B) > 0.25
    ok[:2] = True
    pairs_of = {int(goal_index(a, b, 8)): (a, b) for a in range(8) for b in range(8) if a != b}
    for weights in ({}, {"prior_weight": 0.0, "entropy_weight": 0.0, "format_penalty": -27.63}):
        got = nb.elbo_rewards(cumulative, episode, num_steps, goals, q, ok, **weights)
        for b in range(B):
            e = episode[b]
            walls, states, arrays = played[e]
            trajectory = dict(arrays, helper_pos=np.array([s.helper_pos for s in states]))
            want = elbo_reward_one(walls, trajectory, states[0].goal, int(num_steps[b]),
                                   [pairs_of[int(g)] for g, qi in zip(goals[b], q[b]) if qi > 0],
                                   [float(qi) for qi in q[b] if qi > 0], bool(ok[b]), params,
                                   **weights)
            # t steps of likelihood, then the weighted sum, prior and entropy at its own size
            tol = (max(int(num_steps[b]), 1) * likelihood_tol(params, EPS64)
                   + 16 * EPS64 * (abs(want) + math.log(params.num_goals)))
            assert abs(got[b] - want) <= tol, (b, got[b], want)
