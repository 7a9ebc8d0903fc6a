"""Shortest-path planners: the simulated human's policy and the helper's action values.

Both agents value a cell by the discounted cost of the steps still needed,
`disc(n) = -c (1 - gamma^n) / (1 - gamma)`, and act by a Boltzmann policy over
`Q(a) = gamma V(next) - c`. Softmax ignores constants, so logits are computed as
`(c gamma / ((1 - gamma) tau))` times the action-dependent part of `gamma^n` (see
`relative_discount`), which keeps float32 log-probabilities exact to ~1e-6.

The human (appendix B.3 of MindZero) pursuing the ordered goal (object1, object2):
  * empty-handed: walks to object1 (value uses `d(cell, object1) + max(0, d(o1, o2) - 1)`),
    and picks it when standing on it (forced);
  * carrying object1: if its cell is free and at Manhattan distance 1 of object2, puts it down
    (forced); otherwise, if its last action was a move, it pauses (stays) -- the carry phase
    alternates move and pause, and the pause is part of the policy, with probability 1;
    otherwise it moves toward the nearest free cell adjacent to object2;
  * carrying any other object: the goal cannot explain the state; every action is impossible.
With probability `random_prob` it instead takes one of the four moves uniformly.
"""

from __future__ import annotations

from typing import NamedTuple

import jax.numpy as jnp
import numpy as np

from jaxtom.gridworld.types import (
    INF, MOVES, NUM_ACTIONS, PICK, PUT, STAY, EnvParams, Layout,
)

NEG_INF = -jnp.inf
_MOVE_IDS = np.array(MOVES, np.int32)  # NumPy: no JAX work at import time


def cell_of(pos: jnp.ndarray, width: int) -> jnp.ndarray:
    return pos[..., 1] * width + pos[..., 0]


def logit_scale(params: EnvParams, tau: float) -> float:
    return params.step_cost * params.gamma / ((1.0 - params.gamma) * tau)


def relative_discount(steps: jnp.ndarray, params: EnvParams, axis: int = -1) -> jnp.ndarray:
    """gamma^steps minus its maximum along the action `axis`, i.e. gamma^m (gamma^(n-m) - 1)
    with m the fewest steps. Only this part of disc(n) differs between actions; written this
    way (with log(gamma) rounded once from float64) float32 logits stay exact to ~1e-6 even at
    the 1/tau = 100 scale, where a plain float32 `gamma**n` is off by ~1e-5."""
    log_gamma = np.float32(np.log(np.float64(params.gamma)))
    steps = steps.astype(jnp.float32)
    fewest = jnp.min(steps, axis=axis, keepdims=True)
    return jnp.exp(fewest * log_gamma) * jnp.expm1((steps - fewest) * log_gamma)


def move_log_probs(steps: jnp.ndarray, params: EnvParams) -> jnp.ndarray:
    """The human's Boltzmann log-probabilities over the four moves from their step counts
    (last axis), equal to `log_softmax(scale * relative_discount(steps))`.

    Shortest-path distance is 1-Lipschitz, so the four neighbours of one cell differ from the
    fewest steps `m` by 0, 1 or 2 (or are all unreachable alike). Each hypothesis therefore has
    only three distinct logits, `0 > a1 > a2` with `a_k = scale gamma^m (gamma^k - 1)`, and the
    normaliser is `log(n0 + n1 e^a1 + n2 e^a2)`: three transcendentals per hypothesis instead
    of a dozen. (The goal likelihood reads these values from a table built the same way; see
    `jaxtom.gridworld.likelihood`.)"""
    log_gamma = np.float64(np.log(np.float64(params.gamma)))
    scale = logit_scale(params, params.human_tau)
    steps = steps.astype(jnp.float32)
    fewest = jnp.min(steps, axis=-1, keepdims=True)
    delta = steps - fewest
    base = scale * jnp.exp(fewest * np.float32(log_gamma))
    a1 = base * np.float32(np.expm1(log_gamma))
    a2 = base * np.float32(np.expm1(2 * log_gamma))
    logits = jnp.where(delta == 0, 0.0, jnp.where(delta == 1, a1, a2))
    n1 = jnp.sum(delta == 1, axis=-1, keepdims=True)
    n2 = jnp.sum(delta >= 2, axis=-1, keepdims=True)
    n0 = steps.shape[-1] - n1 - n2
    return logits - jnp.log(n0 + n1 * jnp.exp(a1) + n2 * jnp.exp(a2))


class SceneView:
    """Per-state quantities shared by every goal hypothesis: object cells, ground occupancy,
    and the free cells adjacent to every object."""

    def __init__(self, layout: Layout, obj_pos, human_holding, helper_holding, width: int):
        self.layout = layout
        self.width = width
        num_objects = obj_pos.shape[0]
        ids = jnp.arange(num_objects)
        self.obj_cell = cell_of(obj_pos, width)
        self.on_ground = (ids != human_holding) & (ids != helper_holding)
        neighbours = layout.next_cell[self.obj_cell][:, 1:]  # [K, 4]
        self.adjacent = neighbours
        self.adjacent_free = (neighbours != self.obj_cell[:, None]) & ~self.occupied(neighbours)

    def occupied(self, cells):
        """Whether a ground object lies on each of `cells` (a comparison against the K object
        cells, cheaper under vmap than scattering an occupancy grid)."""
        return jnp.any((self.obj_cell == cells[..., None]) & self.on_ground, axis=-1)

    def distance(self, cells, targets):
        """Path length between broadcastable cell index arrays."""
        return self.layout.dist[cells, targets].astype(jnp.int32)

    def distance_to_adjacent(self, cells, objects):
        """Path length from `cells` to the nearest free cell next to each of `objects`."""
        d = self.layout.dist[cells[..., None], self.adjacent[objects]].astype(jnp.int32)
        return jnp.min(jnp.where(self.adjacent_free[objects], d, INF), axis=-1)

    def manhattan_to_object(self, cell, obj):
        target = self.obj_cell[obj]
        w = self.width
        return jnp.abs(cell % w - target % w) + jnp.abs(cell // w - target // w)


class HumanPolicyParts(NamedTuple):
    """The pieces of the human's policy under each hypothesis, before assembly."""

    move_logp: jnp.ndarray  # [..., 4] Boltzmann log-probabilities of up/down/left/right
    forced_pick: jnp.ndarray  # [...] bool
    forced_put: jnp.ndarray
    pause: jnp.ndarray
    impossible: jnp.ndarray


def off_diagonal(grid: jnp.ndarray) -> jnp.ndarray:
    """[K, K, ...] (object1 rows, object2 columns) -> [K (K - 1), ...] in `goal_pairs` order,
    with slices and reshapes only (no gather)."""
    k = grid.shape[0]
    rest = grid.shape[2:]
    flat = grid.reshape((k * k,) + rest)[1:]
    return flat.reshape((k - 1, k + 1) + rest)[:, :k].reshape((k * (k - 1),) + rest)


def human_policy_parts(view: SceneView, human_cell, holding, last_action, object1, object2,
                       params: EnvParams) -> HumanPolicyParts:
    """Evaluate the human's planner for goals (object1, object2), arrays of any shape; with
    both `None`, for every ordered pair at once as a [K, K] grid (see `off_diagonal`), which
    looks each distance up once per object instead of once per goal."""
    move_cells = view.layout.next_cell[human_cell, 1:]  # [4]
    num_objects = view.obj_cell.shape[0]
    if object1 is None and object2 is None:
        shape = (num_objects, num_objects)
        o1 = jnp.arange(num_objects)[:, None]
        per_o1 = lambda table: table[:, None]  # noqa: E731
        per_o2 = lambda table: table[None, :]  # noqa: E731
        to_object = view.distance(move_cells[None, :], view.obj_cell[:, None])  # [K, 4]
        gap = jnp.maximum(view.distance(view.obj_cell[:, None], view.obj_cell[None, :]) - 1, 0)
        to_adjacent = view.distance_to_adjacent(move_cells[None, :], jnp.arange(num_objects)[:, None])
        seek_steps = per_o1(to_object) + gap[..., None]
        carry_steps = per_o2(to_adjacent)
    else:
        object1, object2 = jnp.asarray(object1), jnp.asarray(object2)
        shape = jnp.broadcast_shapes(object1.shape, object2.shape)
        o1 = jnp.broadcast_to(object1, shape)
        o2 = jnp.broadcast_to(object2, shape)
        per_o1 = lambda table: table[o1]  # noqa: E731
        per_o2 = lambda table: table[o2]  # noqa: E731
        # Empty-handed: head for object1.
        seek_steps = view.distance(move_cells, view.obj_cell[o1][..., None]) + jnp.maximum(
            view.distance(view.obj_cell[o1], view.obj_cell[o2]) - 1, 0)[..., None]
        # Carrying object1: head for a free cell next to object2.
        carry_steps = view.distance_to_adjacent(move_cells, o2[..., None])

    carrying = jnp.broadcast_to(holding == o1, shape)
    steps = jnp.where(carrying[..., None], carry_steps, seek_steps)
    next_to_o2 = per_o2(view.manhattan_to_object(human_cell, jnp.arange(num_objects)) == 1)
    forced_put = carrying & ~view.occupied(human_cell) & next_to_o2
    on_o1 = per_o1(view.on_ground & (view.obj_cell == human_cell))
    return HumanPolicyParts(
        move_logp=move_log_probs(steps, params),
        forced_pick=jnp.broadcast_to((holding < 0) & on_o1, shape),
        forced_put=forced_put,
        pause=carrying & jnp.isin(last_action, _MOVE_IDS) & ~forced_put,  # putting comes first
        impossible=(holding >= 0) & ~carrying)


def _mix_random(logp, is_move, params: EnvParams):
    """With probability random_prob the human takes one of the four moves uniformly."""
    if params.random_prob == 0.0:
        return logp
    uniform = jnp.where(is_move, jnp.log(params.random_prob / 4.0), NEG_INF)
    return jnp.logaddexp(jnp.log1p(-params.random_prob) + logp, uniform)


def human_log_policy(view: SceneView, human_cell, holding, last_action, object1, object2,
                     params: EnvParams) -> jnp.ndarray:
    """log pi(a | state, goal) over the 7 actions, -inf for impossible actions.

    `object1`/`object2` may be arrays of any shape (one entry per hypothesis); the result has
    that shape plus a trailing action axis. Includes the `random_prob` mixture.
    """
    parts = human_policy_parts(view, human_cell, holding, last_action, object1, object2, params)
    shape = parts.pause.shape
    logp = jnp.full(shape + (NUM_ACTIONS,), NEG_INF).at[..., _MOVE_IDS].set(parts.move_logp)

    def only(action):
        return jnp.where(jnp.arange(NUM_ACTIONS) == action, 0.0, NEG_INF)

    logp = jnp.where(parts.pause[..., None], only(STAY), logp)  # the three are exclusive
    logp = jnp.where(parts.forced_put[..., None], only(PUT), logp)
    logp = jnp.where(parts.forced_pick[..., None], only(PICK), logp)
    logp = jnp.where(parts.impossible[..., None], NEG_INF, logp)
    return _mix_random(logp, jnp.isin(jnp.arange(NUM_ACTIONS), _MOVE_IDS), params)


def human_action_log_prob(view: SceneView, human_cell, holding, last_action, action, object1,
                          object2, params: EnvParams) -> jnp.ndarray:
    """log pi(action | state, goal) of one observed action under each hypothesis: the same
    policy as `human_log_policy`, without materialising the other six actions. The goal
    likelihood computes the same values faster (`jaxtom.gridworld.likelihood`, tested
    against this)."""
    parts = human_policy_parts(view, human_cell, holding, last_action, object1, object2, params)
    is_move = jnp.isin(action, _MOVE_IDS)
    moved = parts.move_logp[..., jnp.clip(action - 1, 0, 3)]
    forced = parts.forced_pick | parts.forced_put | parts.pause
    forced_match = (parts.forced_pick & (action == PICK)) | (parts.forced_put & (action == PUT)) | (
        parts.pause & (action == STAY))
    logp = jnp.where(forced, jnp.where(forced_match, 0.0, NEG_INF),
                     jnp.where(is_move, moved, NEG_INF))
    logp = jnp.where(parts.impossible, NEG_INF, logp)
    return _mix_random(logp, is_move, params)


def helper_remaining_steps(view: SceneView, cells, holding, human_holding, object1, object2):
    """Steps the helper still needs under goal (object1, object2) from `cells` while holding
    `holding`: fetch object2 (the object the human is not going for) and put it next to
    object1. Shapes broadcast; returns int32."""
    o1_cell = view.obj_cell[object1]
    o2_cell = view.obj_cell[object2]
    # Empty-handed: walk to object2, pick, carry it next to object1, put.
    fetch = view.distance(cells, o2_cell) + 1 + jnp.maximum(view.distance(o2_cell, o1_cell) - 1, 0) + 1
    o2_available = view.on_ground[object2]
    empty = jnp.where(o2_available, fetch, 0)  # nothing useful to do if object2 is held
    # Holding object2: walk to a free cell next to object1, put.
    deliver = view.distance_to_adjacent(cells, object1) + 1
    # Holding something else: put it down first.
    other = empty + 1
    steps = jnp.where(holding == object2, deliver, jnp.where(holding < 0, empty, other))
    # If the human already carries object2 the hypothesis gives the helper nothing to do.
    return jnp.where(human_holding == object2, 0, steps)


def helper_logits(view: SceneView, helper_cell, helper_holding, human_cell, human_holding,
                  goals, probs, params: EnvParams) -> jnp.ndarray:
    """Boltzmann logits over the 7 helper actions for Q(a) = sum_i p_i V(a | g_i).

    `goals` [M, 2] ordered goals, `probs` [M]. Invalid actions get -inf; picking is not
    allowed while the human is within `yield_distance` path steps of the object (yielding).
    """
    object1, object2 = goals[:, 0], goals[:, 1]
    next_cells = view.layout.next_cell[helper_cell]  # [5] stay/up/down/left/right
    ground_here = view.on_ground & (view.obj_cell == helper_cell)
    can_pick = (helper_holding < 0) & jnp.any(ground_here)
    picked = jnp.argmax(ground_here)  # lowest id on the cell
    can_put = (helper_holding >= 0) & ~view.occupied(helper_cell)
    human_near = view.distance(human_cell, helper_cell) <= params.yield_distance
    can_pick = can_pick & ~human_near

    # Steps after each action, per hypothesis: [7, M].
    move_steps = helper_remaining_steps(view, next_cells[:, None], helper_holding, human_holding,
                                        object1[None], object2[None])
    pick_steps = helper_remaining_steps(view, helper_cell, picked, human_holding, object1, object2)
    # After a put: nothing left if object2 now lies next to object1; a misplaced object2 must
    # be fetched again from here; putting any other object down frees the hands.
    delivered = view.manhattan_to_object(helper_cell, object1) == 1
    refetch = 2 + jnp.maximum(view.distance(helper_cell, view.obj_cell[object1]) - 1, 0)
    dropped = helper_remaining_steps(view, helper_cell, -1, human_holding, object1, object2)
    put_steps = jnp.where(helper_holding == object2, jnp.where(delivered, 0, refetch), dropped)
    put_steps = jnp.where(human_holding == object2, 0, put_steps)
    steps = jnp.concatenate([move_steps, pick_steps[None], put_steps[None]], axis=0)

    value = relative_discount(steps, params, axis=0) @ probs  # [7], up to a constant
    logits = logit_scale(params, params.helper_tau) * value
    valid = jnp.array([True] * 5 + [False, False]).at[PICK].set(can_pick).at[PUT].set(can_put)
    return jnp.where(valid, logits, NEG_INF)


__all__ = ["SceneView", "human_log_policy", "helper_logits", "helper_remaining_steps",
           "cell_of"]
