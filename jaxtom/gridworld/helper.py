"""The helper agent: its planner's Boltzmann policy (`planner.helper_logits`) plus the rules with
which the public MindZero code makes it yield to the human, keep out of its way, break
deadlocks and commit to a goal. The paper (appendix B.3) only names these rules; their settings
live in `EnvParams`, so every speedup figure (oracle, BIP, random and model-driven helpers) runs
the same helper:

  * no pick while the human is within `yield_distance` (3) path steps of the object;
  * holding an object with the human `put_distance` (1) path steps away, put it down if the
    cell has no ground object, and give that object up: it is never picked again, and goals
    for which it was the helper's object leave Q; at `wait_distance` (2), stay;
  * a random move instead of a stay after `deadlock_stays` (2) stays in a row;
  * the belief (exact inference, a model query) is refreshed at the start and after any human
    action but a pause, unless `refresh_on_pause`;
  * teleport, off unless `teleport_after` > 0 (3 in the public code's evaluation): once the
    same goal has been the argmax of `teleport_after` refreshes in a row and the human holds
    one of its objects, the helper commits to that goal for the rest of the episode and, if
    empty-handed, jumps onto the other object and picks it (`env.transition(...,
    helper_teleport)`).

What the helper remembers between steps is a `HelperMemory` pytree carried beside the
`EnvState`; `act` is a pure function of both, so rollouts scan and vmap it. Known differences
from the public code: every helper stay counts toward the deadlock breaker (there only the
planner's stays do), and argmax ties go to the first particle.
"""

from __future__ import annotations

from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxtom.gridworld.planner import SceneView, cell_of, helper_logits
from jaxtom.gridworld.types import MOVES, PICK, PUT, STAY, EnvParams, EnvState

_MOVE_IDS = np.array(MOVES, np.int32)  # NumPy: no JAX work at import time


@struct.dataclass
class HelperMemory:
    """What the helper carries from one step to the next."""

    goals: jnp.ndarray  # int32 [M, 2] the belief it acts on (its latest refresh)
    probs: jnp.ndarray  # float32 [M]
    avoid: jnp.ndarray  # bool [K] objects it put down to make way; never picked again
    top_goal: jnp.ndarray  # int32 [2] argmax goal of the latest refreshes, -1 before any
    top_count: jnp.ndarray  # int32 refreshes in a row with that argmax
    fixed_goal: jnp.ndarray  # int32 [2] (human's object, helper's object) once committed, else -1


def init_memory(num_particles: int, params: EnvParams) -> HelperMemory:
    """No belief yet (zero weight on placeholder goals), nothing given up, nothing committed."""
    return HelperMemory(
        goals=jnp.zeros((num_particles, 2), jnp.int32).at[:, 1].set(1),
        probs=jnp.zeros(num_particles, jnp.float32),
        avoid=jnp.zeros(params.num_objects, bool), top_goal=jnp.full(2, -1, jnp.int32),
        top_count=jnp.int32(0), fixed_goal=jnp.full(2, -1, jnp.int32))


class Decision(NamedTuple):
    action: jnp.ndarray  # int32 helper action (PICK when it teleports)
    teleport: jnp.ndarray  # int32 object to jump onto before the step, -1 for none
    memory: HelperMemory


def refresh_due(state: EnvState, params: EnvParams) -> jnp.ndarray:
    """Whether the helper takes a new belief this step: at the start and after any human action
    but a pause (a pause tells it little, and the public code skips the model query)."""
    return (state.time == 0) | (state.human_last_action != STAY) | params.refresh_on_pause


def yield_rule(state: EnvState, params: EnvParams):
    """Making way while holding an object: `(fires, action)`, PUT when the human is
    `put_distance` path steps away and the cell has no ground object (a put would fail), STAY
    when it is `wait_distance` away. These preempt the planner."""
    width = params.width
    helper_cell = cell_of(state.helper_pos, width)
    distance = state.layout.dist[helper_cell, cell_of(state.human_pos, width)]
    ids = jnp.arange(params.num_objects)
    ground_here = ((ids != state.human_holding) & (ids != state.helper_holding)
                   & (cell_of(state.obj_pos, width) == helper_cell))
    holding = state.helper_holding >= 0
    put = holding & (params.put_distance > 0) & (distance == params.put_distance) & ~jnp.any(
        ground_here)
    wait = holding & (params.wait_distance > 0) & (distance == params.wait_distance)
    return put | wait, jnp.where(put, PUT, STAY).astype(jnp.int32)


def policy_logits(state: EnvState, goals, probs, avoid, params: EnvParams) -> jnp.ndarray:
    """The planner's logits over the 7 actions without what the helper gave up: goals whose
    helper object (object2) it gave up get zero weight (the public code gives them one constant
    value for every action, the same softmax), and it does not pick a given-up object."""
    width = params.width
    view = SceneView(state.layout, state.obj_pos, state.human_holding, state.helper_holding,
                     width)
    helper_cell = cell_of(state.helper_pos, width)
    probs = jnp.where(avoid[goals[:, 1]], 0.0, probs)
    logits = helper_logits(view, helper_cell, state.helper_holding,
                           cell_of(state.human_pos, width), state.human_holding, goals, probs,
                           params)
    here = view.on_ground & (view.obj_cell == helper_cell)
    given_up = jnp.any(here) & avoid[jnp.argmax(here)]  # pick takes the lowest id here
    return logits.at[PICK].set(jnp.where(given_up, -jnp.inf, logits[PICK]))


def policy_action(key, state: EnvState, goals, probs, avoid, params: EnvParams) -> jnp.ndarray:
    """A sample of the planner's policy; a stay after `deadlock_stays` stays in a row becomes a
    random move."""
    k_policy, k_random = jax.random.split(key)
    action = jax.random.categorical(k_policy, policy_logits(state, goals, probs, avoid, params))
    random_move = jnp.asarray(_MOVE_IDS)[jax.random.randint(k_random, (), 0, 4)]
    stuck = (state.helper_stays >= params.deadlock_stays) & (action == STAY)
    return jnp.where(stuck, random_move, action).astype(jnp.int32)


def sample_action(key, state: EnvState, goals, probs, params: EnvParams) -> jnp.ndarray:
    """The helper without memory: the make-way rules, then the policy over the goal
    distribution {(goals[i], probs[i])} with the deadlock breaker (nothing given up, no
    teleport; `act` adds those)."""
    fires, rule = yield_rule(state, params)
    avoid = jnp.zeros(params.num_objects, bool)
    return jnp.where(fires, rule, policy_action(key, state, goals, probs, avoid, params))


def track_commitment(state: EnvState, memory: HelperMemory, refresh, fires,
                     params: EnvParams):
    """The teleport rule's bookkeeping on a refresh the make-way rules left alone: the argmax
    streak, the commitment once the streak reaches `teleport_after` while the human holds one
    of the goal's objects, and the object to jump onto (-1 if none, or when holding one)."""
    if params.teleport_after == 0:
        return memory, jnp.int32(-1)
    track = refresh & ~fires & (memory.fixed_goal[0] < 0)
    top = memory.goals[jnp.argmax(memory.probs)]
    same = jnp.all(top == memory.top_goal)
    count = jnp.where(track, jnp.where(same, memory.top_count + 1, 1), memory.top_count)
    human = state.human_holding
    commit = track & (count >= params.teleport_after) & ((human == top[0]) | (human == top[1]))
    other = jnp.where(human == top[0], top[1], top[0])
    memory = memory.replace(
        top_goal=jnp.where(track, top, memory.top_goal), top_count=count.astype(jnp.int32),
        fixed_goal=jnp.where(commit, jnp.stack([human, other]), memory.fixed_goal))
    return memory, jnp.where(commit & (state.helper_holding < 0), other, -1).astype(jnp.int32)


def belief_in_use(memory: HelperMemory):
    """The goals and weights the policy acts on: the committed goal alone once there is one."""
    committed = memory.fixed_goal[0] >= 0
    goals = jnp.where(committed, jnp.broadcast_to(memory.fixed_goal, memory.goals.shape),
                      memory.goals)
    first = (jnp.arange(memory.probs.shape[0]) == 0).astype(memory.probs.dtype)
    return goals, jnp.where(committed, first, memory.probs)


def act(key, state: EnvState, memory: HelperMemory, goals, probs, params: EnvParams,
        refresh=None) -> Decision:
    """One helper step. `goals`/`probs` is the belief on offer (a posterior, a model's
    particles, the true goal); it replaces the remembered one when `refresh` (default
    `refresh_due`). Order as in the public code: the make-way rules, the teleport rule, then
    the policy."""
    if refresh is None:
        refresh = refresh_due(state, params)
    memory = memory.replace(goals=jnp.where(refresh, goals, memory.goals).astype(jnp.int32),
                            probs=jnp.where(refresh, probs, memory.probs).astype(jnp.float32))
    fires, rule = yield_rule(state, params)
    memory, teleport = track_commitment(state, memory, refresh, fires, params)
    use_goals, use_probs = belief_in_use(memory)
    policy = policy_action(key, state, use_goals, use_probs, memory.avoid, params)
    action = jnp.where(teleport >= 0, PICK, jnp.where(fires, rule, policy)).astype(jnp.int32)
    gave_up = fires & (rule == PUT) & (jnp.arange(params.num_objects) == state.helper_holding)
    return Decision(action, teleport, memory.replace(avoid=memory.avoid | gave_up))


__all__ = ["Decision", "HelperMemory", "act", "belief_in_use", "init_memory", "policy_action",
           "policy_logits", "refresh_due", "sample_action", "track_commitment", "yield_rule"]
