"""Constants, parameters and state of the Construction gridworld.

Coordinates are `(x, y)` with y pointing up; a cell's flat index is `y * width + x`.
Static sizes and planner constants live in the hashable `EnvParams` (passed to `jit` as a
static argument); everything that changes per episode lives in pytrees.
"""

from __future__ import annotations

import dataclasses
import itertools

import jax.numpy as jnp
import numpy as np
from flax import struct

# --- actions -------------------------------------------------------------------------------
STAY, UP, DOWN, LEFT, RIGHT, PICK, PUT = range(7)
NUM_ACTIONS = 7
ACTION_NAMES = ("stay", "up", "down", "left", "right", "pick", "put")
# (dx, dy) for every action; pick/put do not move.
ACTION_DELTAS = np.array([(0, 0), (0, 1), (0, -1), (-1, 0), (1, 0), (0, 0), (0, 0)], np.int32)
MOVES = (UP, DOWN, LEFT, RIGHT)

# --- object labels -------------------------------------------------------------------------
COLORS = ("brown", "pink", "red", "blue", "green", "yellow", "orange", "purple", "cyan", "gray")
SHAPES = ("square", "circle", "star", "triangle", "pentagon")
# Held out of the training split (appendix B.2 of MindZero, public code).
HELD_OUT_COLORS = ("cyan", "gray")
HELD_OUT_SHAPES = ("triangle", "pentagon")

# Distance sentinel for unreachable cells; fits int16 and keeps gamma**INF == 0 in float32.
INF = 10_000

ASCII_WALL = "#"
ASCII_FREE = "."
ASCII_HUMAN = "H"
ASCII_HELPER = "P"


@dataclasses.dataclass(frozen=True)
class EnvParams:
    """Static configuration: sizes, planner constants, randomness. Hashable, so jit-static."""

    height: int = 10
    width: int = 10
    num_objects: int = 8
    min_walls: int = 0
    max_walls: int = 20
    max_steps: int = 100
    # Simulated human (appendix B.3): Boltzmann over shortest-path values.
    human_tau: float = 0.01
    gamma: float = 0.95
    step_cost: float = 0.1
    random_prob: float = 0.0  # 0.15 in assistance evaluation, 0 for data generation
    # Helper (appendix B.3: it "follows heuristic rules to yield to the human, avoid blocking
    # paths, and prevent deadlocks"; the rules and their defaults are the public code's).
    helper_tau: float = 0.01
    yield_distance: int = 3  # no pick while the human is within this many path steps of it
    # Holding an object, with the human at exactly this path distance: put it down (and give it
    # up), or stay. 0 turns a rule off.
    put_distance: int = 1
    wait_distance: int = 2
    deadlock_stays: int = 2  # a random move instead of a stay after this many stays in a row
    refresh_on_pause: bool = False  # the belief (model query, inference) refreshes after pauses
    teleport_after: int = 0  # 0: off; 3 in the public code's evaluation (see gridworld.helper)
    # Likelihood floor per step; keeps log-likelihoods finite for impossible actions.
    likelihood_floor: float = 1e-12
    # Which labels episodes may use (indices into COLORS / SHAPES).
    colors: tuple[int, ...] = tuple(range(len(COLORS)))
    shapes: tuple[int, ...] = tuple(range(len(SHAPES)))

    def __post_init__(self):
        problems = []
        if self.height < 3 or self.width < 3:
            problems.append(f"grid must be at least 3x3, got {self.height}x{self.width}")
        if not 2 <= self.num_objects <= len(COLORS):
            problems.append(f"num_objects must be in [2, {len(COLORS)}], got {self.num_objects}")
        if not 0 <= self.min_walls <= self.max_walls:
            problems.append(f"need 0 <= min_walls <= max_walls, got {self.min_walls}, {self.max_walls}")
        if self.max_walls > self.height * self.width // 4:
            problems.append(f"max_walls={self.max_walls} leaves too little free space on "
                            f"{self.height}x{self.width} (at most a quarter of the cells)")
        if self.max_steps < 1:
            problems.append(f"max_steps must be >= 1, got {self.max_steps}")
        if not 0.0 <= self.random_prob <= 1.0:
            problems.append(f"random_prob must be in [0, 1], got {self.random_prob}")
        for name in ("yield_distance", "put_distance", "wait_distance", "deadlock_stays",
                     "teleport_after"):
            if getattr(self, name) < 0:
                problems.append(f"{name} must be >= 0, got {getattr(self, name)}")
        if self.put_distance and self.put_distance == self.wait_distance:
            problems.append(f"put_distance and wait_distance must differ, both {self.put_distance}")
        if self.human_tau <= 0 or self.helper_tau <= 0:
            problems.append("temperatures must be > 0")
        if not 0 < self.gamma < 1:
            problems.append(f"gamma must be in (0, 1), got {self.gamma}")
        if not 0 < self.likelihood_floor < 1:
            problems.append(f"likelihood_floor must be in (0, 1), got {self.likelihood_floor}")
        if len(set(self.colors)) < self.num_objects or any(not 0 <= c < len(COLORS) for c in self.colors):
            problems.append(f"colors must be >= num_objects distinct ids in [0, {len(COLORS)}), got {self.colors}")
        if not self.shapes or any(not 0 <= s < len(SHAPES) for s in self.shapes):
            problems.append(f"shapes must be non-empty ids in [0, {len(SHAPES)}), got {self.shapes}")
        if problems:
            raise ValueError("invalid EnvParams: " + "; ".join(problems))

    @property
    def num_cells(self) -> int:
        return self.height * self.width

    @property
    def num_goals(self) -> int:
        return self.num_objects * (self.num_objects - 1)

    def replace(self, **changes) -> "EnvParams":
        return dataclasses.replace(self, **changes)


def goal_pairs(num_objects: int = 8) -> np.ndarray:
    """Ordered goals `(object1, object2)`: object1 is picked first and put next to object2."""
    return np.array([(i, j) for i, j in itertools.permutations(range(num_objects), 2)], np.int32)


def goal_index(object1, object2, num_objects: int = 8):
    """Inverse of `goal_pairs`: index of the ordered pair (works on ints and arrays)."""
    return object1 * (num_objects - 1) + object2 - (object2 > object1)


@struct.dataclass
class Layout:
    """Everything that depends only on the walls, computed once per episode at reset."""

    walls: jnp.ndarray  # bool [H, W]
    dist: jnp.ndarray  # int16 [C, C] all-pairs shortest path lengths, INF if unreachable
    next_cell: jnp.ndarray  # int32 [C, 5] cell reached by stay/up/down/left/right


@struct.dataclass
class EnvState:
    """Full state of one episode. The human's goal is hidden from observations."""

    layout: Layout
    obj_pos: jnp.ndarray  # int32 [K, 2] (x, y); a carried object sits on its carrier
    obj_color: jnp.ndarray  # int32 [K]
    obj_shape: jnp.ndarray  # int32 [K]
    human_pos: jnp.ndarray  # int32 [2]
    helper_pos: jnp.ndarray  # int32 [2]
    human_start: jnp.ndarray  # int32 [2]
    human_holding: jnp.ndarray  # int32, object id or -1
    helper_holding: jnp.ndarray  # int32, object id or -1
    human_last_action: jnp.ndarray  # int32, STAY at reset
    helper_stays: jnp.ndarray  # int32, consecutive helper stays (deadlock breaking)
    goal: jnp.ndarray  # int32 [2] ordered goal (object1, object2)
    time: jnp.ndarray  # int32
    done: jnp.ndarray  # bool


@struct.dataclass
class Observation:
    """What an observer (the helper, a model) sees: the state without the goal."""

    walls: jnp.ndarray
    obj_pos: jnp.ndarray
    obj_color: jnp.ndarray
    obj_shape: jnp.ndarray
    human_pos: jnp.ndarray
    helper_pos: jnp.ndarray
    human_holding: jnp.ndarray
    helper_holding: jnp.ndarray
    human_last_action: jnp.ndarray
    time: jnp.ndarray


def observe(state: EnvState) -> Observation:
    return Observation(
        walls=state.layout.walls, obj_pos=state.obj_pos, obj_color=state.obj_color,
        obj_shape=state.obj_shape, human_pos=state.human_pos, helper_pos=state.helper_pos,
        human_holding=state.human_holding, helper_holding=state.helper_holding,
        human_last_action=state.human_last_action, time=state.time)
