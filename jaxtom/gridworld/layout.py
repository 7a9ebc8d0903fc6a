"""Walls: random connected layouts, ASCII layouts, and the shortest-path tables built from them.

Walls never change during an episode, so one all-pairs distance table (frontier relaxation in
`lax.while_loop` over an INF-padded grid, never wrap-around rolls) answers every planner query:
distance to an object is a lookup at the object's current cell, so nothing needs rebuilding
when objects move.
"""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np

from jaxtom.gridworld.types import (
    ACTION_DELTAS, ASCII_FREE, ASCII_HELPER, ASCII_HUMAN, ASCII_WALL, INF, EnvParams, Layout,
)


def _move_table(walls: jnp.ndarray) -> jnp.ndarray:
    """[C, 5]: the cell reached from each cell by stay/up/down/left/right (blocked -> same)."""
    height, width = walls.shape
    ys, xs = jnp.meshgrid(jnp.arange(height), jnp.arange(width), indexing="ij")
    here = (ys * width + xs).reshape(-1)
    columns = []
    for dx, dy in ACTION_DELTAS[:5]:
        nx, ny = xs + dx, ys + dy
        inside = (nx >= 0) & (nx < width) & (ny >= 0) & (ny < height)
        target_wall = walls[jnp.clip(ny, 0, height - 1), jnp.clip(nx, 0, width - 1)]
        ok = (inside & ~target_wall).reshape(-1)
        columns.append(jnp.where(ok, (ny * width + nx).reshape(-1), here))
    return jnp.stack(columns, axis=1).astype(jnp.int32)


def _relax(dist: jnp.ndarray, walls: jnp.ndarray) -> jnp.ndarray:
    """Shortest paths from every source in `dist` [S, H, W]: relax 4-neighbours until stable."""
    height, width = walls.shape
    big = jnp.asarray(INF, dist.dtype)

    def body(carry):
        d, _ = carry
        padded = jnp.pad(d, ((0, 0), (1, 1), (1, 1)), constant_values=INF)
        best = jnp.minimum(
            jnp.minimum(padded[:, :-2, 1:-1], padded[:, 2:, 1:-1]),
            jnp.minimum(padded[:, 1:-1, :-2], padded[:, 1:-1, 2:]))
        new = jnp.where(walls[None], big, jnp.minimum(d, jnp.minimum(best, big - 1) + 1))
        return new, jnp.any(new != d)

    out, _ = jax.lax.while_loop(lambda c: c[1], body, (dist, jnp.array(True)))
    return out


def all_pairs_distances(walls: jnp.ndarray) -> jnp.ndarray:
    """int16 [C, C] shortest-path lengths between cells (INF where either end is a wall)."""
    height, width = walls.shape
    cells = height * width
    start = jnp.where(jnp.eye(cells, dtype=bool) & ~walls.reshape(1, -1), 0, INF)
    dist = _relax(start.astype(jnp.int16).reshape(cells, height, width), walls)
    return dist.reshape(cells, cells)


def is_connected(walls: jnp.ndarray) -> jnp.ndarray:
    """True when every free cell is reachable from every other (and at least one is free)."""
    height, width = walls.shape
    free = ~walls.reshape(-1)
    source = jnp.argmax(free)
    start = jnp.where(jnp.arange(height * width) == source, 0, INF).astype(jnp.int16)
    dist = _relax(start.reshape(1, height, width), walls).reshape(-1)
    return jnp.any(free) & jnp.all(jnp.where(free, dist < INF, True))


def make_layout(walls: jnp.ndarray) -> Layout:
    return Layout(walls=walls, dist=all_pairs_distances(walls), next_cell=_move_table(walls))


def sample_walls(key: jax.Array, params: EnvParams) -> jnp.ndarray:
    """U(min_walls, max_walls) wall cells, resampled until the free cells are connected."""
    cells = params.num_cells

    def draw(k):
        k_count, k_cells = jax.random.split(k)
        count = jax.random.randint(k_count, (), params.min_walls, params.max_walls + 1)
        order = jax.random.permutation(k_cells, cells)
        rank = jnp.zeros(cells, jnp.int32).at[order].set(jnp.arange(cells))
        return (rank < count).reshape(params.height, params.width)

    def cond(carry):
        _, walls = carry
        return ~is_connected(walls)

    def body(carry):
        k, _ = carry
        k, sub = jax.random.split(k)
        return k, draw(sub)

    key, sub = jax.random.split(key)
    _, walls = jax.lax.while_loop(cond, body, (key, draw(sub)))
    return walls


@dataclasses.dataclass(frozen=True)
class AsciiLayout:
    """A hand-written scene: walls, and optionally agent and object starting cells."""

    walls: np.ndarray  # bool [H, W], row 0 is y = 0
    human_pos: tuple[int, int] | None
    helper_pos: tuple[int, int] | None
    objects: dict[int, tuple[int, int]]  # object id -> (x, y)


def parse_ascii(text: str) -> AsciiLayout:
    """Parse rows written top (y = H-1) to bottom: `.` free, `#` wall, `H` human, `P` helper,
    digits 0-9 objects. Spaces between cells are allowed (the transcript's format)."""
    rows = [line.replace(" ", "") for line in text.strip("\n").splitlines() if line.strip()]
    if not rows:
        raise ValueError("layout string is empty; expected rows of '.', '#', 'H', 'P' or digits")
    width = len(rows[0])
    for number, row in enumerate(rows):
        if len(row) != width:
            raise ValueError(f"layout row {number} has {len(row)} cells, expected {width} like row 0")
    height = len(rows)
    walls = np.zeros((height, width), bool)
    human = helper = None
    objects: dict[int, tuple[int, int]] = {}
    for number, row in enumerate(rows):
        y = height - 1 - number
        for x, char in enumerate(row):
            if char == ASCII_WALL:
                walls[y, x] = True
            elif char == ASCII_HUMAN:
                human = (x, y)
            elif char == ASCII_HELPER:
                helper = (x, y)
            elif char.isdigit():
                if int(char) in objects:
                    raise ValueError(f"object {char} appears twice in the layout")
                objects[int(char)] = (x, y)
            elif char != ASCII_FREE:
                raise ValueError(
                    f"unknown layout character {char!r} at (x={x}, y={y}); expected '.', '#', "
                    "'H', 'P' or a digit")
    if objects and sorted(objects) != list(range(len(objects))):
        raise ValueError(f"object ids must be 0..{len(objects) - 1}, got {sorted(objects)}")
    if not bool(is_connected(jnp.asarray(walls))):
        raise ValueError("layout is disconnected: some free cells cannot reach the others")
    return AsciiLayout(walls=walls, human_pos=human, helper_pos=helper, objects=objects)
