"""The planner likelihood's hot loop: `log P(observed action | goal, state)` of every ordered
goal for a flat batch of steps, written for XLA:CPU (faster there than evaluating
`planner.human_action_log_prob` over the goal grid, with the same values).

Why it is fast:
  * The human's Boltzmann log-probability of a move depends only on the fewest steps `m` any
    move leaves and on the move pattern: how many moves are one or two steps worse, and how
    much worse the observed one is (see `planner.move_log_probs`). Every value, with the
    `random_prob` mixture and the floor already applied, sits in one float64-built table
    `[row, m]`, so no goal evaluates a transcendental.
  * Each object has one move pattern per step, whichever phase the human is in: object1's own
    distances when empty-handed (the goal only adds the constant gap to object2), object2's
    adjacent-cell distances when carrying. The 56 goals are then table lookups from [K]
    per-object codes plus the object-pair gap.
  * Intermediates that many elements read are materialised (`materialize`): XLA:CPU otherwise
    recomputes cheap producers inside every consumer element.
Distance lookups index flattened per-episode tables, so a chunk of episodes is one gather.
"""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np

from jaxtom.gridworld.types import ACTION_DELTAS, INF, MOVES, PICK, PUT, STAY, EnvParams

# Table rows: forced action taken, a move the goal forbids, impossible, padding (0), then one
# row per move pattern (n1 * 12 + n2 * 3 + d: n1 / n2 moves one / two steps worse than the
# best, d = min(2, how much worse the observed move is)).
ROW_MATCH, ROW_MISS, ROW_FLOOR, ROW_ZERO, FIRST_PATTERN_ROW = range(5)
NUM_PATTERNS = 48


def steps_cap(params: EnvParams) -> int:
    """Table columns are m = 0..cap; a reachable `m` (path to object1 plus the object gap) is
    below 2 C, and column cap holds the m -> infinity limit (unreachable targets)."""
    if 2 * params.num_cells >= INF:
        raise ValueError(f"{params.height}x{params.width} grids are too large for INF={INF}")
    return 2 * params.num_cells


@functools.lru_cache(maxsize=16)
def log_likelihood_table(params: EnvParams) -> np.ndarray:
    """float32 [(FIRST_PATTERN_ROW + NUM_PATTERNS) * (cap + 1)]: floored, mixed log-likelihoods,
    computed in float64 from the closed form `a_k = scale gamma^m (gamma^k - 1)`."""
    cap = steps_cap(params)
    log_gamma = math.log(params.gamma)
    scale = params.step_cost * params.gamma / ((1.0 - params.gamma) * params.human_tau)
    rp = params.random_prob
    log_miss = math.log(rp / 4.0) if rp > 0 else -np.inf

    def mix(logp):  # with probability random_prob one of the four moves, uniformly
        return logp if rp == 0 else np.logaddexp(math.log1p(-rp) + logp, log_miss)

    base = scale * np.exp(np.arange(cap + 1) * log_gamma)
    base[cap] = 0.0  # the limit
    a = [np.zeros_like(base), base * math.expm1(log_gamma), base * math.expm1(2 * log_gamma)]
    rows = np.full((FIRST_PATTERN_ROW + NUM_PATTERNS, cap + 1), -np.inf)
    rows[ROW_MATCH] = math.log1p(-rp)
    rows[ROW_MISS] = log_miss
    for n1 in range(4):
        for n2 in range(4 - n1):
            norm = np.log((4 - n1 - n2) + n1 * np.exp(a[1]) + n2 * np.exp(a[2]))
            for d in range(3):
                rows[FIRST_PATTERN_ROW + n1 * 12 + n2 * 3 + d] = mix(a[d] - norm)
    rows = np.maximum(rows, math.log(params.likelihood_floor))
    rows[ROW_ZERO] = 0.0
    return rows.reshape(-1).astype(np.float32)


def materialize(x: jnp.ndarray) -> jnp.ndarray:
    """`x`, computed once: an OR-reduction over (x, 0) is a reduce, which XLA:CPU keeps out of
    consumers that read each element many times (cheap producers are otherwise recomputed in
    every consumer element)."""
    zero = jnp.zeros((), x.dtype)
    return jax.lax.reduce(jnp.stack([x, jnp.zeros_like(x)]), zero, jax.lax.bitwise_or, (0,))


def _take(flat: jnp.ndarray, index: jnp.ndarray) -> jnp.ndarray:
    """flat[index] for non-negative indices (unsigned, so no wrap-around handling)."""
    return flat.at[index.astype(jnp.uint32)].get(mode="clip")


def open_moves(next_cell: jnp.ndarray) -> jnp.ndarray:
    """int32 [..., C]: bit s set where move s (up, down, left, right) leaves the cell."""
    here = jnp.arange(next_cell.shape[-2])
    bits = [(next_cell[..., s + 1] != here).astype(jnp.int32) << s for s in range(4)]
    return jnp.sum(jnp.stack(bits), axis=0)


def steps_goal_log_likelihoods(dist, moves, episode, human_pos, holding, last_action,
                               helper_holding, obj_pos, action, valid,
                               params: EnvParams) -> jnp.ndarray:
    """[N, G] floored `log P(action | goal, state)` of N steps, 0 where not `valid`.

    `dist` int16 [E * C * C] and `moves` int32 [E * C] (`open_moves`) are E episodes' tables,
    flattened; `episode` [N] says which one each step uses; the other arguments are per step
    ([N], positions [N, 2], `obj_pos` [N, K, 2])."""
    width, cells = params.width, params.num_cells
    num_objects = obj_pos.shape[-2]
    cap = steps_cap(params)
    table = jnp.asarray(log_likelihood_table(params))
    offsets = jnp.array([int(ACTION_DELTAS[a][1]) * width + int(ACTION_DELTAS[a][0])
                         for a in MOVES])
    slot = jnp.arange(4)
    ids = jnp.arange(num_objects)
    n = human_pos.shape[0]

    dist_base = episode * (cells * cells)
    human = human_pos[:, 1] * width + human_pos[:, 0]
    obj = materialize(obj_pos[..., 1] * width + obj_pos[..., 0])  # [N, K]
    ground = (ids != holding[:, None]) & (ids != helper_holding[:, None])
    carrying = holding >= 0

    def step_to(cells_, open_bits):  # the cell each move reaches (blocked moves stay)
        return cells_[..., None] + jnp.where((open_bits[..., None] >> slot) & 1 == 1, offsets, 0)

    # Rows of the distance table for the human's four moves: [N, 4].
    move_rows = materialize(
        dist_base[:, None] + step_to(human, _take(moves, episode * cells + human)) * cells)
    # Ground occupancy as a bitset over cells, [N, words].
    words = jnp.stack([
        jax.lax.reduce(jnp.where(ground & ((obj >> 5) == w), 1 << (obj & 31), 0),
                       jnp.int32(0), jax.lax.bitwise_or, (1,))
        for w in range((cells + 31) // 32)], axis=-1)

    def occupied(cells_):
        word = jnp.zeros_like(cells_)
        for w in range(words.shape[-1]):
            word = jnp.where(cells_ >> 5 == w, words[:, w].reshape((n,) + (1,) * (cells_.ndim - 1)),
                             word)
        return (word >> (cells_ & 31)) & 1 == 1

    # Where each object's phase heads, -1 for none: [N, K, 4]. Empty-handed, the object's own
    # cell; carrying, the free cells next to it (not blocked, no ground object).
    neighbour = step_to(obj, _take(moves, episode[:, None] * cells + obj))
    free = (neighbour != obj[..., None]) & ~occupied(neighbour)
    targets = materialize(jnp.where(
        carrying[:, None, None], jnp.where(free, neighbour, -1),
        jnp.where(slot == 0, obj[..., None], -1)))
    # Steps each move leaves, per object and move: [N, K, 4].
    steps = materialize(jnp.min(jnp.where(
        targets[:, :, None, :] >= 0,
        _take(dist, move_rows[:, None, :, None] + jnp.maximum(targets, 0)[:, :, None, :]), INF),
        axis=-1).astype(jnp.int32))
    fewest = jnp.min(steps, axis=-1)
    worse = steps - fewest[..., None]

    is_move = (action >= 1) & (action <= 4)
    miss = jnp.where(is_move, ROW_MISS, ROW_FLOOR)[:, None]

    def taken(forced):  # the row of a forced action: taken, or not
        return jnp.where((action == forced)[:, None], ROW_MATCH, miss)

    forced_pick = ground & (obj == human[:, None])  # empty-handed, per object1
    next_to = (jnp.abs(obj_pos[..., 0] - human_pos[:, None, 0])
               + jnp.abs(obj_pos[..., 1] - human_pos[:, None, 1])) == 1
    forced_put = ~occupied(human)[:, None] & next_to  # carrying, per object2
    paused = ((last_action >= 1) & (last_action <= 4))[:, None]
    special = jnp.where(
        carrying[:, None],
        jnp.where(forced_put, taken(PUT), jnp.where(paused, taken(STAY), -1)),
        jnp.where(forced_pick, taken(PICK), -1))
    special = jnp.where(is_move[:, None] | (special >= 0), special, ROW_FLOOR)
    # The row per object, summed over the four moves so that it is one (materialised) reduce.
    pattern_terms = jnp.where(worse == 1, 12, jnp.where(worse >= 2, 3, 0)) + jnp.where(
        slot + 1 == action[:, None, None], jnp.minimum(worse, 2), 0)
    first = slot == 0
    row = jnp.sum(jnp.where((special >= 0)[..., None], jnp.where(first, special[..., None], 0),
                            pattern_terms + jnp.where(first, FIRST_PATTERN_ROW, 0)), axis=-1)

    # Goals (object1 rows, object2 columns): [N, K, K].
    gap = jnp.maximum(_take(dist, dist_base[:, None, None] + obj[:, :, None] * cells
                            + obj[:, None, :]).astype(jnp.int32) - 1, 0)
    goal_row = jnp.where(
        carrying[:, None, None],
        jnp.where(ids[:, None] == holding[:, None, None], row[:, None, :], miss[:, :, None]),
        row[:, :, None])
    goal_row = jnp.where(valid[:, None, None], goal_row, ROW_ZERO)
    m = jnp.where(carrying[:, None, None], fewest[:, None, :], fewest[:, :, None] + gap)
    index = goal_row * (cap + 1) + jnp.minimum(m, cap)
    k = num_objects
    off_diagonal = index.reshape(n, k * k)[:, 1:].reshape(n, k - 1, k + 1)[:, :, :k]
    return _take(table, off_diagonal.reshape(n, k * (k - 1)))
