"""RGB images of Construction scenes, rendered inside `jit` so episodes can be drawn in batch.

The picture follows the paper's figures: white cells with thin grid lines, dark walls, objects
as coloured shapes, the human as a green ring and the helper as a red outlined square (outlines,
so an object under an agent stays visible; a carried object is drawn smaller at its carrier).
The top row of the image is y = H-1. Shape stencils are boolean masks built once per cell size
in NumPy, so the jitted renderer only gathers and selects.

`style="cells"` draws the same state as flat cells for vision towers trained from scratch:
each object fills its cell (a carried one fills its carrier's), the path so far is a light
fill rather than dots, and the agents are thick borders. With one vision token per cell every
fact of the state then sits in one token as a colour, with no shape to resolve, which a
tiny tower learns to read in a few hundred steps (the figures' small shapes it does not).
"""

from __future__ import annotations

import functools
import os

import jax
import jax.numpy as jnp
import numpy as np
from PIL import Image

from jaxtom.gridworld.types import COLORS, SHAPES

# RGB for each entry of `COLORS`, in the same order.
PALETTE = np.array([
    (139, 69, 19),    # brown
    (255, 105, 180),  # pink
    (220, 20, 30),    # red
    (30, 90, 230),    # blue
    (30, 150, 50),    # green
    (245, 205, 0),    # yellow
    (255, 135, 0),    # orange
    (130, 40, 170),   # purple
    (0, 200, 215),    # cyan
    (150, 150, 150),  # gray
], np.uint8)
assert len(PALETTE) == len(COLORS)

BACKGROUND = np.array((255, 255, 255), np.uint8)
GRID_LINE = np.array((205, 205, 205), np.uint8)
WALL = np.array((64, 64, 64), np.uint8)
HUMAN = np.array((0, 205, 0), np.uint8)
HELPER = np.array((235, 0, 0), np.uint8)
TRACE = np.array((0, 120, 0), np.uint8)
TRACE_FILL = np.array((175, 235, 175), np.uint8)  # the path so far, `style="cells"`
MARK = np.array((0, 0, 0), np.uint8)  # `marks`, `style="cells"`: an inner border
STYLES = ("figure", "cells")

MIN_CELL_SIZE = 4
_OBJECT_RADIUS = 0.32  # in cell widths; agent markers are outlines around it
_CARRIED_RADIUS = 0.2
_RING_RADIUS = 0.44


def _cell_coords(cell_size: int):
    """Pixel-centre coordinates in cell units, origin at the cell centre, y pointing up."""
    centres = (np.arange(cell_size) + 0.5) / cell_size - 0.5
    x = np.broadcast_to(centres[None, :], (cell_size, cell_size))
    y = np.broadcast_to(-centres[:, None], (cell_size, cell_size))
    return x, y


def _inside_polygon(x, y, vertices) -> np.ndarray:
    """Even-odd rule point-in-polygon test for arrays of points."""
    inside = np.zeros(x.shape, bool)
    for (x0, y0), (x1, y1) in zip(vertices, np.roll(vertices, -1, axis=0)):
        crosses = (y0 > y) != (y1 > y)
        with np.errstate(divide="ignore", invalid="ignore"):
            x_cross = x0 + (y - y0) * (x1 - x0) / (y1 - y0)
        inside ^= crosses & (x < x_cross)
    return inside


def _regular_polygon(corners: int, radius: float, inner: float | None = None) -> np.ndarray:
    """Vertices of a regular polygon (or a star when `inner` is given), one corner up."""
    count = corners * 2 if inner is not None else corners
    angles = np.pi / 2 + 2 * np.pi * np.arange(count) / count
    radii = np.full(count, radius)
    if inner is not None:
        radii[1::2] = inner
    return np.stack([radii * np.cos(angles), radii * np.sin(angles)], axis=1)


def _shape_mask(shape: str, cell_size: int, radius: float) -> np.ndarray:
    x, y = _cell_coords(cell_size)
    if shape == "square":
        return (np.abs(x) <= radius * 0.82) & (np.abs(y) <= radius * 0.82)
    if shape == "circle":
        return x**2 + y**2 <= radius**2
    if shape == "star":
        return _inside_polygon(x, y, _regular_polygon(5, radius * 1.1, inner=radius * 0.45))
    if shape == "triangle":
        return _inside_polygon(x, y + radius * 0.15, _regular_polygon(3, radius * 1.1))
    if shape == "pentagon":
        return _inside_polygon(x, y, _regular_polygon(5, radius))
    raise ValueError(f"unknown shape {shape!r}; expected one of {SHAPES}")


@functools.lru_cache(maxsize=None)
def stencils(cell_size: int) -> dict[str, np.ndarray]:
    """Boolean [cell_size, cell_size] masks (row 0 at the top): `objects` [S, 2, cs, cs] per
    shape at full and carried size, `human` ring, `helper` outline, `dot` for traces, `grid`."""
    if not isinstance(cell_size, int) or cell_size < MIN_CELL_SIZE:
        raise ValueError(f"cell_size must be an int >= {MIN_CELL_SIZE}, got {cell_size!r}")
    x, y = _cell_coords(cell_size)
    radius = np.sqrt(x**2 + y**2)
    objects = np.stack([[_shape_mask(s, cell_size, r) for r in (_OBJECT_RADIUS, _CARRIED_RADIUS)]
                        for s in SHAPES])
    stroke = max(1, cell_size // 10)
    rows, cols = np.indices((cell_size, cell_size))
    edge = np.minimum.reduce([rows, cols, cell_size - 1 - rows, cell_size - 1 - cols])
    grid = (rows == 0) | (cols == 0)
    thick = max(2, cell_size // 6)
    masks = {
        "objects": objects,
        "human_border": edge < thick,  # `style="cells"`: the agents as thick borders
        "helper_border": (edge >= thick) & (edge < 2 * thick),
        "human": (radius <= _RING_RADIUS) & (radius >= _RING_RADIUS - (stroke + 1) / cell_size),
        "helper": (edge >= 1) & (edge < 1 + stroke),
        "dot": radius <= max(0.09, 0.75 / cell_size),
        "grid": grid,
    }
    for mask in masks.values():
        mask.flags.writeable = False  # shared through the cache
    return masks


stencils(16)  # the default size, built at import


def _fields(state):
    """Walls and positions from an `EnvState` (walls in its layout) or an `Observation`."""
    walls = state.layout.walls if hasattr(state, "layout") else getattr(state, "walls", None)
    if walls is None:
        raise ValueError(f"expected an EnvState or Observation, got {type(state).__name__}")
    if walls.ndim != 2:
        raise ValueError(f"render_rgb draws one state: walls must be [H, W], got shape "
                         f"{walls.shape}; use jax.vmap(render_rgb) for a batch")
    return walls


def _trace_arrays(trace):
    """(positions [T, 2], mask [T]) from a Trajectory, a (positions, mask) pair or positions."""
    if hasattr(trace, "human_pos") and hasattr(trace, "valid"):
        positions, mask = trace.human_pos, trace.valid
    elif isinstance(trace, (tuple, list)) and len(trace) == 2:
        positions, mask = trace
    else:
        positions, mask = trace, None
    positions = jnp.asarray(positions)
    if positions.ndim != 2 or positions.shape[-1] != 2:
        raise ValueError(f"trace positions must be [T, 2] (x, y), got shape {positions.shape}")
    mask = jnp.ones(positions.shape[0], bool) if mask is None else jnp.asarray(mask, bool)
    if mask.shape != positions.shape[:1]:
        raise ValueError(f"trace mask must be [T]={positions.shape[:1]}, got {mask.shape}")
    return positions.astype(jnp.int32), mask


def _cell_layer(cell_values: jnp.ndarray, cell_size: int) -> jnp.ndarray:
    """Expand a per-cell array [H, W, ...] (row 0 = y 0) to pixels [H*cs, W*cs, ...], top row
    y = H-1."""
    flipped = cell_values[::-1]
    return jnp.repeat(jnp.repeat(flipped, cell_size, axis=0), cell_size, axis=1)


def _tile(mask: np.ndarray, height: int, width: int) -> jnp.ndarray:
    return jnp.asarray(np.tile(mask, (height, width)))


def _marker(pos, mask: np.ndarray, height: int, width: int, cell_size: int) -> jnp.ndarray:
    """Pixels of a per-cell stencil placed on the cell `pos`."""
    here = jnp.zeros((height, width), bool).at[pos[1], pos[0]].set(True)
    return _cell_layer(here, cell_size) & _tile(mask, height, width)


def render_rgb(state, *, cell_size: int = 16, trace=None, style: str = "figure",
               marks=None) -> jnp.ndarray:
    """uint8 [H*cell_size, W*cell_size, 3] picture of one `EnvState` or `Observation`.

    `trace` (optional) marks cells the human stood on: a `Trajectory` (its positions before
    each valid step), a `(positions [T, 2], mask [T])` pair, or positions alone. `style`:
    "figure" (the paper's figures: shapes, a ring, dots) or "cells" (flat cells; see the
    module docstring). `marks` (cells style only; positions or a (positions, mask) pair like
    `trace`): cells outlined by a black inner border, for evidence a caller draws in (the
    image observation's ranked partner). Checks its input, then runs one jit-compiled kernel
    (static `cell_size`); works inside `jit`, and `jax.vmap` it for batches.
    """
    stencils(cell_size)  # validates cell_size
    if style not in STYLES:
        raise ValueError(f"style must be one of {STYLES}, got {style!r}")
    if marks is not None and style != "cells":
        raise ValueError(f"marks are drawn in style 'cells' only, got style {style!r}")
    _fields(state)
    if trace is not None:
        trace = _trace_arrays(trace)
    if style == "figure":
        return _render(state, cell_size, trace)
    return _render_cells(state, cell_size, trace, None if marks is None else _trace_arrays(marks))


def _visited(trace, height: int, width: int) -> jnp.ndarray:
    positions, mask = trace
    return jnp.zeros((height, width), bool).at[positions[:, 1], positions[:, 0]].max(mask)


@functools.partial(jax.jit, static_argnums=(1,))
def _render_cells(state, cell_size: int, trace, marks=None) -> jnp.ndarray:
    """`style="cells"`: per-cell colours first ([H, W, 3], row 0 = y 0), then pixels."""
    walls = jnp.asarray(_fields(state), bool)
    height, width = walls.shape
    masks = stencils(cell_size)
    fill = jnp.broadcast_to(jnp.asarray(BACKGROUND), (height, width, 3))
    if trace is not None:
        fill = jnp.where(_visited(trace, height, width)[..., None], TRACE_FILL, fill)
    fill = jnp.where(walls[..., None], WALL, fill)
    obj_pos = jnp.asarray(state.obj_pos, jnp.int32)
    ids = jnp.arange(obj_pos.shape[0])
    carried = (ids == state.human_holding) | (ids == state.helper_holding)
    colours = jnp.asarray(PALETTE)[jnp.asarray(state.obj_color)]
    ys, xs = np.indices((height, width))
    on_cell = (xs[None] == obj_pos[:, 0, None, None]) & (ys[None] == obj_pos[:, 1, None, None])
    for layer in (on_cell & ~carried[:, None, None], on_cell & carried[:, None, None]):
        fill = jnp.where(jnp.any(layer, axis=0)[..., None], colours[jnp.argmax(layer, 0)], fill)
    image = _cell_layer(fill, cell_size)
    grid = _tile(masks["grid"], height, width).at[-1, :].set(True).at[:, -1].set(True)
    image = jnp.where(grid[..., None], GRID_LINE, image)
    if marks is not None:
        ring = _cell_layer(_visited(marks, height, width), cell_size) & _tile(
            masks["helper_border"], height, width)
        image = jnp.where(ring[..., None], MARK, image)
    for pos, mask, colour in ((state.helper_pos, "helper_border", HELPER),
                              (state.human_pos, "human_border", HUMAN)):
        border = _marker(jnp.asarray(pos), masks[mask], height, width, cell_size)
        image = jnp.where(border[..., None], colour, image)
    return image.astype(jnp.uint8)


@functools.partial(jax.jit, static_argnums=(1,))
def _render(state, cell_size: int, trace) -> jnp.ndarray:
    walls = jnp.asarray(_fields(state), bool)
    height, width = walls.shape
    masks = stencils(cell_size)
    image = jnp.broadcast_to(jnp.asarray(BACKGROUND), (height * cell_size, width * cell_size, 3))

    grid = _tile(masks["grid"], height, width)
    grid = grid.at[-1, :].set(True).at[:, -1].set(True)
    image = jnp.where(grid[..., None], GRID_LINE, image)

    if trace is not None:
        visited = _visited(trace, height, width)
        dots = _cell_layer(visited, cell_size) & _tile(masks["dot"], height, width)
        image = jnp.where(dots[..., None], TRACE, image)

    image = jnp.where(_cell_layer(walls, cell_size)[..., None], WALL, image)

    obj_pos = jnp.asarray(state.obj_pos, jnp.int32)
    ids = jnp.arange(obj_pos.shape[0])
    carried = (ids == state.human_holding) | (ids == state.helper_holding)
    palette = jnp.asarray(PALETTE)
    object_masks = jnp.asarray(masks["objects"])[state.obj_shape, carried.astype(jnp.int32)]
    rows, cols = np.indices((height * cell_size, width * cell_size))
    pixel_x, pixel_y = cols // cell_size, height - 1 - rows // cell_size
    local = object_masks[:, rows % cell_size, cols % cell_size]  # [K, Hpx, Wpx]
    on_cell = ((pixel_x[None] == obj_pos[:, 0, None, None])
               & (pixel_y[None] == obj_pos[:, 1, None, None]))
    drawn = local & on_cell
    for layer in (drawn & ~carried[:, None, None], drawn & carried[:, None, None]):
        colour = palette[jnp.asarray(state.obj_color)[jnp.argmax(layer, axis=0)]]
        image = jnp.where(jnp.any(layer, axis=0)[..., None], colour, image)

    helper = _marker(jnp.asarray(state.helper_pos), masks["helper"], height, width, cell_size)
    image = jnp.where(helper[..., None], HELPER, image)
    human = _marker(jnp.asarray(state.human_pos), masks["human"], height, width, cell_size)
    image = jnp.where(human[..., None], HUMAN, image)
    return image.astype(jnp.uint8)


def _as_image(image, name: str = "image") -> np.ndarray:
    array = np.asarray(image)
    if array.dtype != np.uint8 or array.ndim != 3 or array.shape[-1] != 3:
        raise ValueError(f"{name} must be uint8 [height, width, 3], got {array.dtype} "
                         f"{array.shape}")
    return array


def save_png(image, path: str | os.PathLike) -> str:
    """Write one rendered image (uint8 [h, w, 3]) as a PNG file; returns the path."""

    Image.fromarray(_as_image(image)).save(path, format="PNG")
    return os.fspath(path)


def save_gif(frames, path: str | os.PathLike, duration_ms: int = 250) -> str:
    """Write frames (uint8 [N, h, w, 3] or a list of images) as a looping animated GIF."""

    if duration_ms <= 0:
        raise ValueError(f"duration_ms must be > 0, got {duration_ms}")
    images = [_as_image(frame, f"frame {i}") for i, frame in enumerate(frames)]
    if not images:
        raise ValueError("save_gif needs at least one frame")
    if len({im.shape for im in images}) != 1:
        raise ValueError(f"frames must share one shape, got {sorted({im.shape for im in images})}")
    pictures = [Image.fromarray(im) for im in images]
    pictures[0].save(path, format="GIF", save_all=True, append_images=pictures[1:],
                     duration=duration_ms, loop=0)
    return os.fspath(path)


__all__ = ["render_rgb", "save_png", "save_gif", "stencils", "STYLES", "PALETTE", "WALL",
           "HUMAN", "HELPER", "TRACE", "TRACE_FILL", "GRID_LINE", "BACKGROUND", "MARK"]
