"""Vectorised NumPy baselines: the fair speed reference for the gridworld benchmarks.

Why this exists: `jaxtom.gridworld.reference` and `jaxtom.mindzero.reference` are scalar
Python oracles, written for clarity (one state, one goal, one 7-action distribution at a
time; lazy BFS; the reward recomputing all 56 goals for every sample). They are correctness
references, and a speedup against them says more about Python loops than about jaxtom. This
module is what a competent NumPy user would write for the same two quantities, and the
benchmarks (`gridworld.py` (b), `reward.py`) report their headline ratios against it:

* `goal_log_likelihoods`: floored `log P(a_t | g, s_t)` of the human's observed actions under
  every ordered goal, [T, G] for all steps and goals of an episode at once (or any batch of
  episodes), with array operations only: no Python loop over steps or goals.
* `elbo_rewards`: the MindZero ELBO reward (eq. 4) of a whole batch of samples at once: each
  episode's cumulative log-likelihoods are computed once and indexed per sample.

Both sides are handed the same precomputed tables of each episode's layout (`Layout.dist`,
the all-pairs shortest-path lengths, and `Layout.next_cell`), so path search is counted on
neither side. Arithmetic is float64 by default (NumPy's natural choice); `dtype=np.float32` is
~1.5x faster and the benchmarks' default. The model is the human of
`jaxtom.gridworld.planner`: a Boltzmann policy over `Q(a) = gamma V(next) - c` with `V` the
discounted cost of the steps still needed, forced pick / put / carry-phase pause, the
`random_prob` mixture and the per-step floor. Up to constants the move logits are
`scale * gamma^steps`, `scale = c gamma / ((1 - gamma) tau)`. Ordinary NumPy care is taken
(distances looked up per object, then broadcast to the [K, K] goal grid; the four moves on a
leading axis, since NumPy reduces a trailing axis of 4 ~10x slower; empty-handed and carrying
steps evaluated apart). With `table=True` it also uses the precomputed table jaxtom uses
(`jaxtom.gridworld.likelihood.log_likelihood_table`: every floored, mixed log-probability,
indexed by move pattern and fewest steps), so no goal evaluates a transcendental: the
benchmarks report both variants, without the table (what NumPy code written from the model
would do) and with it (the same algorithm as jaxtom, so the ratio is the implementation's).
"""

from __future__ import annotations

import math

import numpy as np

from jaxtom.gridworld.types import INF, PICK, PUT, STAY

__all__ = ["cumulative_log_likelihoods", "elbo_rewards", "goal_log_likelihoods"]


def goal_log_likelihoods(dist, next_cell, human_pos, human_holding, human_last_action,
                         helper_holding, obj_pos, action, params, dtype=np.float64,
                         table=False):
    """`[..., T, G]` floored log-likelihoods of the human's actions under every ordered goal
    (goals in `goal_pairs` order: object1 rows, object2 columns, diagonal dropped).

    dist: int [..., C, C] all-pairs path lengths (INF unreachable); next_cell: int [..., C, 5]
    cell reached by stay/up/down/left/right; per step (leading dims `...` then T):
    human_pos [..., T, 2] (x, y), human_holding / human_last_action / helper_holding /
    action [..., T], obj_pos [..., T, K, 2]. Every step is evaluated; mask steps past an
    episode's end yourself. `table`: look every value up in jaxtom's precomputed table
    (float32 values, whatever `dtype`) instead of computing it."""
    dist = np.asarray(dist)
    next_cell = np.asarray(next_cell)
    action = np.asarray(action)
    batch, steps = action.shape[:-1], action.shape[-1]
    cells = dist.shape[-1]
    width = params.width
    episodes = math.prod(batch)
    n = episodes * steps
    k = np.asarray(obj_pos).shape[-2]

    flat_dist = dist.reshape(-1)
    moves_of = next_cell.reshape(-1, 5)[:, 1:]  # [E * C, 4]
    base = np.repeat(np.arange(episodes) * cells, steps)  # row offset of each step's episode
    pos = np.asarray(human_pos).reshape(n, 2)
    objs = np.asarray(obj_pos).reshape(n, k, 2)
    holding = np.asarray(human_holding).reshape(n)
    helper = np.asarray(helper_holding).reshape(n)
    last = np.asarray(human_last_action).reshape(n)
    act = action.reshape(n)

    human = pos[:, 1] * width + pos[:, 0]  # [N]
    obj = objs[..., 1] * width + objs[..., 0]  # [N, K]
    ids = np.arange(k)
    rows = np.arange(n)
    ground = (ids != holding[:, None]) & (ids != helper[:, None])  # [N, K]
    # ground occupancy of every cell, [N, C]
    occupancy = np.zeros((n, cells), bool)
    occupancy[np.broadcast_to(rows[:, None], ground.shape)[ground], obj[ground]] = True

    def lookup(rows_, b):  # path length from table row `rows_` (base + cell) to cell `b`
        return flat_dist[rows_ * cells + b].astype(np.int32)

    # Boltzmann log-probability of the observed move: logits scale * gamma^steps, shifted by
    # their max (the fewest steps) for stability. The four moves are the leading axis: NumPy
    # reduces over a leading axis as a few elementwise passes, over a trailing axis of 4 ~10x
    # slower.
    scale = params.step_cost * params.gamma / ((1.0 - params.gamma) * params.human_tau)
    log_gamma = dtype(math.log(params.gamma))
    is_move = (act >= 1) & (act <= 4)
    slot = np.clip(act - 1, 0, 3)

    def observed_move_logp(step_counts, observed):  # steps [4, M, ...], slots [M] -> [M, ...]
        fewest = step_counts.min(0)
        # logits - max = scale gamma^m (gamma^(s - m) - 1), computed without cancellation
        shifted = (scale * np.exp(fewest.astype(dtype) * log_gamma)
                   * np.expm1((step_counts - fewest).astype(dtype) * log_gamma))
        picked = np.take_along_axis(
            shifted, observed.reshape((1, -1) + (1,) * (shifted.ndim - 2)), 0)[0]
        return picked - np.log(np.exp(shifted).sum(0))

    if table:
        return _table_log_likelihoods(
            params, n, k, batch, steps, dtype, lookup, base, moves_of, human, obj, objs, pos,
            holding, helper, last, act, ground, occupancy, rows, ids, is_move, slot)

    # Each step is in one phase: empty-handed steps need every (object1, object2), carrying
    # steps only object2 (any other object1 is impossible), so each phase's steps are
    # evaluated apart.
    move_rows = base + moves_of[base + human].T  # [4, N]: the table row of each move's cell
    obj_rows = base[:, None] + obj  # [N, K]
    moved = np.empty((n, k, k), dtype)  # log P(observed move), [N, K(object1), K(object2)]
    seek = np.flatnonzero(holding < 0)
    # empty-handed: the move's distance to object1, plus the object1 -> object2 gap
    to_obj = lookup(move_rows[:, seek, None], obj[seek])  # [4, S, K]
    gap = np.maximum(lookup(obj_rows[seek, :, None], obj[seek, None, :]) - 1, 0)  # [S, K, K]
    moved[seek] = observed_move_logp(to_obj[..., None] + gap, slot[seek])
    carry = np.flatnonzero(holding >= 0)
    # carrying: the move's distance to the nearest free cell next to object2
    adjacent = np.moveaxis(moves_of[obj_rows[carry]], -1, 0)  # [4 sides, R, K]
    free = (adjacent != obj[carry]) & ~occupancy[carry[:, None], adjacent]
    to_adj = np.where(free, lookup(move_rows[:, None, carry, None], adjacent), INF).min(1)
    moved[carry] = observed_move_logp(to_adj, slot[carry])[:, None, :]

    carrying = ids == holding[:, None]  # [N, K(object1)]: holding object1
    here_occupied = occupancy[rows, human]  # [N]
    next_to = (np.abs(objs[..., 0] - pos[:, None, 0])
               + np.abs(objs[..., 1] - pos[:, None, 1])) == 1  # [N, K(object2)]
    forced_put = carrying[:, :, None] & (~here_occupied[:, None] & next_to)[:, None, :]
    pause = carrying[:, :, None] & ((last >= 1) & (last <= 4))[:, None, None] & ~forced_put
    forced_pick = (holding < 0)[:, None] & ground & (obj == human[:, None])  # [N, K(object1)]
    impossible = (holding >= 0)[:, None] & ~carrying  # [N, K(object1)]

    logp = np.where(is_move[:, None, None], moved, -np.inf)  # the unforced policy only moves
    logp = np.where(pause, np.where(act == STAY, 0.0, -np.inf)[:, None, None], logp)
    logp = np.where(forced_put, np.where(act == PUT, 0.0, -np.inf)[:, None, None], logp)
    logp = np.where(forced_pick[:, :, None],
                    np.where(act == PICK, 0.0, -np.inf)[:, None, None], logp)
    logp = np.where(impossible[:, :, None], -np.inf, logp)

    rp = params.random_prob
    if rp > 0:  # with probability rp one of the four moves, uniformly
        mixed = math.log1p(-rp) + logp
        logp = np.where(is_move[:, None, None], np.logaddexp(mixed, math.log(rp / 4)), mixed)
    logp = np.maximum(logp, dtype(math.log(params.likelihood_floor)))
    goals = logp.reshape(n, k * k)[:, 1:].reshape(n, k - 1, k + 1)[:, :, :k]  # off-diagonal
    return goals.reshape(batch + (steps, k * (k - 1))).astype(dtype, copy=False)


def _table_log_likelihoods(params, n, k, batch, steps, dtype, lookup, base, moves_of, human,
                           obj, objs, pos, holding, helper, last, act, ground, occupancy, rows,
                           ids, is_move, slot):
    """`goal_log_likelihoods` by lookups in jaxtom's table: each object's move pattern (how
    many moves are one / two+ steps worse than the best, how much worse the observed one is)
    picks the row, the fewest steps left the column; forced and impossible cases are the
    table's constant rows."""
    from jaxtom.gridworld import likelihood as lk

    flat = lk.log_likelihood_table(params)
    cap = lk.steps_cap(params)
    move_rows = base + moves_of[base + human].T  # [4, N]
    obj_rows = base[:, None] + obj  # [N, K]
    carrying = holding >= 0

    def pattern(step_counts, which):  # [4, M, K] of steps `which` -> (row, fewest) [M, K]
        fewest = step_counts.min(0)
        worse = step_counts - fewest
        seen = np.minimum(np.take_along_axis(worse, slot[None, which, None], 0)[0], 2)
        row = (lk.FIRST_PATTERN_ROW + 12 * (worse == 1).sum(0) + 3 * (worse >= 2).sum(0)
               + seen)
        return row, fewest

    # each phase's steps apart, as the computing variant does. Empty-handed: object1's own
    # distances (the object gap only adds to the fewest steps)
    pattern_row = np.empty((n, k, k), np.int64)
    fewest = np.empty((n, k, k), np.int64)
    seek = np.flatnonzero(~carrying)
    row, few = pattern(lookup(move_rows[:, seek, None], obj[seek]), seek)  # [S, K]
    gap = np.maximum(lookup(obj_rows[seek, :, None], obj[seek, None, :]) - 1, 0)  # [S, K, K]
    pattern_row[seek] = row[:, :, None]
    fewest[seek] = few[:, :, None] + gap
    # carrying: the nearest free cell next to object2
    carry = np.flatnonzero(carrying)
    adjacent = np.moveaxis(moves_of[obj_rows[carry]], -1, 0)  # [4 sides, R, K]
    free = (adjacent != obj[carry]) & ~occupancy[carry[:, None], adjacent]
    to_adj = np.where(free, lookup(move_rows[:, None, carry, None], adjacent), INF).min(1)
    row, few = pattern(to_adj, carry)  # per object2
    pattern_row[carry] = row[:, None, :]
    fewest[carry] = few[:, None, :]

    miss = np.where(is_move, lk.ROW_MISS, lk.ROW_FLOOR)[:, None, None]

    def taken(forced):
        return np.where((act == forced)[:, None, None], lk.ROW_MATCH, miss)

    holding_it = ids == holding[:, None]  # [N, K(object1)]
    next_to = (np.abs(objs[..., 0] - pos[:, None, 0])
               + np.abs(objs[..., 1] - pos[:, None, 1])) == 1  # [N, K(object2)]
    forced_put = (~occupancy[rows, human][:, None] & next_to)[:, None, :]
    paused = ((last >= 1) & (last <= 4))[:, None, None]
    forced_pick = (ground & (obj == human[:, None]))[:, :, None]
    unforced = np.where(is_move[:, None, None], -1, lk.ROW_FLOOR)  # -1: the pattern row
    code = np.where(
        carrying[:, None, None],
        np.where(~holding_it[:, :, None], miss,
                 np.where(forced_put, taken(PUT), np.where(paused, taken(STAY), unforced))),
        np.where(forced_pick, taken(PICK), unforced))
    goal_row = np.where(code < 0, pattern_row, code)
    index = goal_row * (cap + 1) + np.minimum(fewest, cap)
    goals = index.reshape(n, k * k)[:, 1:].reshape(n, k - 1, k + 1)[:, :, :k]
    out = flat[goals.reshape(n, k * (k - 1))]
    return out.reshape(batch + (steps, k * (k - 1))).astype(dtype, copy=False)


def cumulative_log_likelihoods(per_step, valid=None):
    """[..., T + 1, G]: entry t is `log P(a_1:t | g)` (entry 0 is 0); steps where `valid`
    [..., T] is False contribute nothing."""
    per_step = np.asarray(per_step)
    if valid is not None:
        per_step = np.where(np.asarray(valid)[..., None], per_step, 0.0)
    out = np.zeros(per_step.shape[:-2] + (per_step.shape[-2] + 1, per_step.shape[-1]),
                   per_step.dtype)
    np.cumsum(per_step, axis=-2, out=out[..., 1:, :])
    return out


def elbo_rewards(cumulative, episode, num_steps, goals, q, ok, *, prior_weight=1.0,
                 entropy_weight=1.0, format_penalty=None, floor=1e-12):
    """Eq. 4 for B samples at once, uniform goal prior:
    `R = sum_i q_i (log P(a_1:t | g_i) - w_prior log G) - w_entropy sum_i q_i log q_i`,
    malformed samples (`ok` False) get `format_penalty`, or `(t + 1) log(floor)` if None.

    cumulative: [E, T + 1, G] (`cumulative_log_likelihoods`); episode, num_steps, ok: [B];
    goals: [B, N] ordered-goal indices; q: [B, N] weights, 0 on padding."""
    cumulative = np.asarray(cumulative)
    q = np.asarray(q, cumulative.dtype)
    num_steps = np.asarray(num_steps)
    num_goals = cumulative.shape[-1]
    rows = cumulative[np.asarray(episode), np.clip(num_steps, 0, cumulative.shape[1] - 1)]
    picked = np.take_along_axis(rows, np.asarray(goals), axis=1)  # [B, N]
    live = q > 0
    likelihood = np.where(live, q * picked, 0.0).sum(1)
    entropy = -np.where(live, q * np.log(np.maximum(q, floor)), 0.0).sum(1)
    prior = -math.log(num_goals) * np.where(live, q, 0.0).sum(1)  # sum_i q_i log(1 / G)
    value = likelihood + prior_weight * prior + entropy_weight * entropy
    penalty = (format_penalty if format_penalty is not None
               else (num_steps + 1.0) * math.log(floor))
    return np.where(np.asarray(ok), value, penalty)
