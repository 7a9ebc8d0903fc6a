"""The Construction environment in the gymnax style: `reset(key, params)` and
`step(key, state, helper_action, params)`, with the simulated human inside the environment.

Step order (as in the public MindZero code): the human moves, then the helper (walls and the
border block moves, agents may overlap); carried objects follow their carriers; then pick and
put resolve, human first. Pick takes the lowest-id ground object on the agent's cell when the
agent holds nothing; put needs a cell without a ground object. The episode is done when the two
goal objects lie on the ground at Manhattan distance 1, or at `max_steps`. A finished episode is
frozen: further steps leave it unchanged.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from jaxtom.gridworld import helper as helper_lib
from jaxtom.gridworld import layout as layout_lib
from jaxtom.gridworld.planner import SceneView, cell_of, human_log_policy
from jaxtom.gridworld.types import (
    NUM_ACTIONS, PICK, PUT, STAY, EnvParams, EnvState, Layout, Observation, observe,
)


def scene_view(state: EnvState, params: EnvParams) -> SceneView:
    return SceneView(state.layout, state.obj_pos, state.human_holding, state.helper_holding,
                     params.width)


def _xy(cell, width):
    return jnp.stack([cell % width, cell // width], axis=-1).astype(jnp.int32)


def _place_objects(key, free: jnp.ndarray, params: EnvParams) -> jnp.ndarray:
    """Object cells on free cells, pairwise Manhattan distance > 1."""
    width = params.width
    cell_ids = jnp.arange(params.num_cells)
    cx, cy = cell_ids % width, cell_ids // width

    def place(allowed, k):
        cell = jax.random.categorical(k, jnp.where(allowed, 0.0, -jnp.inf))
        near = jnp.abs(cx - cell % width) + jnp.abs(cy - cell // width) <= 1
        return allowed & ~near, cell

    _, cells = jax.lax.scan(place, free, jax.random.split(key, params.num_objects))
    return cells


def _sample_labels(key, params: EnvParams):
    """One shape per episode and distinct colours (as in the paper's figures)."""
    k_shape, k_color = jax.random.split(key)
    shapes = jnp.array(params.shapes)
    colors = jnp.array(params.colors)
    shape = shapes[jax.random.randint(k_shape, (), 0, len(params.shapes))]
    color = jax.random.permutation(k_color, colors)[: params.num_objects]
    return color.astype(jnp.int32), jnp.full((params.num_objects,), shape, jnp.int32)


def order_goal(layout: Layout, human_start, obj_pos, pair, width: int) -> jnp.ndarray:
    """Ordered goal from an unordered pair: the object nearer (path distance) to the human's
    start is picked first; ties go to the lower id."""
    a, b = jnp.minimum(pair[0], pair[1]), jnp.maximum(pair[0], pair[1])
    start = cell_of(human_start, width)
    da = layout.dist[start, cell_of(obj_pos[a], width)]
    db = layout.dist[start, cell_of(obj_pos[b], width)]
    return jnp.where(db < da, jnp.stack([b, a]), jnp.stack([a, b])).astype(jnp.int32)


def validate_goal(goal, num_objects: int) -> tuple[int, int]:
    """Check a concrete goal pair names two different existing objects."""
    pair = tuple(int(g) for g in np.asarray(goal).reshape(-1))
    if len(pair) != 2:
        raise ValueError(f"a goal is two object ids (object1, object2), got {pair}")
    for obj in pair:
        if not 0 <= obj < num_objects:
            raise ValueError(f"goal names unknown object {obj}; objects are 0..{num_objects - 1}")
    if pair[0] == pair[1]:
        raise ValueError(f"goal objects must differ, got {pair}")
    return pair


def init_state(key, walls, obj_cells, human_cell, helper_cell, params: EnvParams,
               goal_pair=None, labels=None) -> EnvState:
    """Build a state from explicit walls and cells; the goal pair is sampled if not given."""
    if tuple(walls.shape) != (params.height, params.width):
        raise ValueError(f"walls have shape {tuple(walls.shape)}, expected "
                         f"(height, width) = ({params.height}, {params.width}) from EnvParams")
    if np.shape(obj_cells) != (params.num_objects,):
        raise ValueError(f"got {np.shape(obj_cells)} object cells, expected "
                         f"({params.num_objects},) from EnvParams.num_objects")
    if goal_pair is not None and not isinstance(goal_pair, jax.core.Tracer):
        validate_goal(goal_pair, params.num_objects)
    k_goal, k_labels = jax.random.split(key)
    layout = layout_lib.make_layout(walls)
    obj_pos = _xy(obj_cells, params.width)
    human_pos = _xy(human_cell, params.width)
    if goal_pair is None:
        goal_pair = jax.random.choice(k_goal, params.num_objects, (2,), replace=False)
    color, shape = labels if labels is not None else _sample_labels(k_labels, params)
    return EnvState(
        layout=layout, obj_pos=obj_pos, obj_color=color, obj_shape=shape,
        human_pos=human_pos, helper_pos=_xy(helper_cell, params.width), human_start=human_pos,
        human_holding=jnp.int32(-1), helper_holding=jnp.int32(-1),
        human_last_action=jnp.int32(STAY), helper_stays=jnp.int32(0),
        goal=order_goal(layout, human_pos, obj_pos, jnp.asarray(goal_pair), params.width),
        time=jnp.int32(0), done=jnp.array(False))


def state_from_ascii(key: jax.Array, text: str, params: EnvParams, goal=None,
                     labels=None) -> EnvState:
    """A state from an ASCII scene (see `layout.parse_ascii`); sizes must match `params`."""
    scene = layout_lib.parse_ascii(text)
    height, width = scene.walls.shape
    if (height, width) != (params.height, params.width):
        raise ValueError(f"layout is {height}x{width} but EnvParams is "
                         f"{params.height}x{params.width} (height x width)")
    if len(scene.objects) != params.num_objects:
        raise ValueError(f"layout has {len(scene.objects)} objects, expected "
                         f"{params.num_objects} (digits 0..{params.num_objects - 1})")
    if scene.human_pos is None or scene.helper_pos is None:
        raise ValueError("layout needs one human 'H' and one helper 'P'")
    cells = np.array([y * width + x for x, y in (scene.objects[k] for k in range(params.num_objects))])
    human = scene.human_pos[1] * width + scene.human_pos[0]
    helper = scene.helper_pos[1] * width + scene.helper_pos[0]
    return init_state(key, jnp.asarray(scene.walls), jnp.asarray(cells, jnp.int32), human, helper,
                      params, goal_pair=goal, labels=labels)


def reset(key: jax.Array, params: EnvParams) -> tuple[Observation, EnvState]:
    """A random episode: connected walls, 8 labelled objects, both agents, a hidden goal."""
    k_walls, k_obj, k_agents, k_rest = jax.random.split(key, 4)
    walls = layout_lib.sample_walls(k_walls, params)
    free = ~walls.reshape(-1)
    obj_cells = _place_objects(k_obj, free, params)
    empty = free & ~jnp.zeros(params.num_cells, bool).at[obj_cells].set(True)
    k_human, k_helper = jax.random.split(k_agents)
    human_cell = jax.random.categorical(k_human, jnp.where(empty, 0.0, -jnp.inf))
    empty = empty.at[human_cell].set(False)
    helper_cell = jax.random.categorical(k_helper, jnp.where(empty, 0.0, -jnp.inf))
    state = init_state(k_rest, walls, obj_cells, human_cell, helper_cell, params)
    return observe(state), state


def goal_reached(state: EnvState, params: EnvParams) -> jnp.ndarray:
    o1, o2 = state.goal[0], state.goal[1]
    on_ground = (state.human_holding != o1) & (state.human_holding != o2) & (
        state.helper_holding != o1) & (state.helper_holding != o2)
    gap = jnp.abs(state.obj_pos[o1] - state.obj_pos[o2]).sum()
    return on_ground & (gap == 1)


def _move(layout: Layout, pos, action, width):
    moved = layout.next_cell[cell_of(pos, width), jnp.minimum(action, 4)]
    return jnp.where(action <= 4, _xy(moved, width), pos)


def _pick_put(state: EnvState, agent_pos, holding, action, width):
    """Resolve one agent's pick/put; returns its new holding (objects stay put)."""
    cell = cell_of(agent_pos, width)
    ids = jnp.arange(state.obj_pos.shape[0])
    held = (ids == state.human_holding) | (ids == state.helper_holding)
    here = ~held & (cell_of(state.obj_pos, width) == cell)
    pick_ok = (action == PICK) & (holding < 0) & jnp.any(here)
    put_ok = (action == PUT) & (holding >= 0) & ~jnp.any(here)
    new_holding = jnp.where(pick_ok, jnp.argmax(here), jnp.where(put_ok, -1, holding))
    return new_holding.astype(jnp.int32)


def transition(state: EnvState, human_action, helper_action, params: EnvParams,
               helper_teleport=-1) -> EnvState:
    """Deterministic effect of both agents' actions (the env's physics). A `helper_teleport`
    object id (>= 0) puts the helper on that object's cell in the move phase instead of
    moving it: the teleport rule of `gridworld.helper`, which then picks (action PICK)."""
    width = params.width
    ids = jnp.arange(params.num_objects)
    human_pos = _move(state.layout, state.human_pos, human_action, width)
    helper_pos = _move(state.layout, state.helper_pos, helper_action, width)
    if not (isinstance(helper_teleport, int) and helper_teleport < 0):
        target = state.obj_pos[jnp.maximum(helper_teleport, 0)]
        helper_pos = jnp.where(helper_teleport >= 0, target, helper_pos)
    obj_pos = jnp.where((ids == state.human_holding)[:, None], human_pos, state.obj_pos)
    obj_pos = jnp.where((ids == state.helper_holding)[:, None], helper_pos, obj_pos)
    moved = state.replace(human_pos=human_pos, helper_pos=helper_pos, obj_pos=obj_pos)
    human_holding = _pick_put(moved, human_pos, state.human_holding, human_action, width)
    moved = moved.replace(human_holding=human_holding)
    helper_holding = _pick_put(moved, helper_pos, state.helper_holding, helper_action, width)
    moved = moved.replace(
        helper_holding=helper_holding,
        human_last_action=jnp.asarray(human_action, jnp.int32),
        helper_stays=jnp.where(helper_action == STAY, state.helper_stays + 1, 0).astype(jnp.int32),
        time=state.time + 1)
    done = goal_reached(moved, params) | (moved.time >= params.max_steps)
    new = moved.replace(done=done)
    return jax.tree.map(lambda old, nxt: jnp.where(state.done, old, nxt), state, new)


def human_action_log_probs(state: EnvState, params: EnvParams) -> jnp.ndarray:
    """The simulated human's log policy over the 7 actions under its true goal."""
    view = scene_view(state, params)
    return human_log_policy(view, cell_of(state.human_pos, params.width), state.human_holding,
                            state.human_last_action, state.goal[0], state.goal[1], params)


def sample_human_action(key, state: EnvState, params: EnvParams) -> jnp.ndarray:
    return jax.random.categorical(key, human_action_log_probs(state, params)).astype(jnp.int32)


def sample_helper_action(key, state: EnvState, goals, probs, params: EnvParams) -> jnp.ndarray:
    """Helper action from a goal distribution {(goals[i], probs[i])} with the helper's
    memoryless rules (make way, deadlock breaker); `gridworld.helper.act` is the full helper,
    with what it remembers (given-up objects, the belief after pauses, teleport)."""
    return helper_lib.sample_action(key, state, goals, probs, params)


def validate_action(action: int) -> int:
    if not 0 <= int(action) < NUM_ACTIONS:
        raise ValueError(f"action id {action} out of range; expected 0..{NUM_ACTIONS - 1} "
                         "(stay, up, down, left, right, pick, put)")
    return int(action)


def step(key: jax.Array, state: EnvState, helper_action, params: EnvParams):
    """One environment step from the helper's point of view; the human acts inside.

    Returns `(obs, state, reward, done, info)`: reward is -1 for every step taken before the
    task is done; `info` carries the human's action. Under jit the action is clipped to the
    valid range (check untraced inputs with `validate_action`).
    """
    if isinstance(helper_action, int):
        validate_action(helper_action)
    helper_action = jnp.clip(jnp.asarray(helper_action, jnp.int32), 0, NUM_ACTIONS - 1)
    human_action = sample_human_action(key, state, params)
    new_state = transition(state, human_action, helper_action, params)
    reward = jnp.where(state.done, 0.0, -1.0)
    return observe(new_state), new_state, reward, new_state.done, {"human_action": human_action}


__all__ = ["reset", "step", "transition", "init_state", "sample_human_action",
           "sample_helper_action", "human_action_log_probs", "goal_reached", "scene_view",
           "order_goal", "validate_action", "validate_goal", "state_from_ascii"]
