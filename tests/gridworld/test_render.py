import chex
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from PIL import Image

from jaxtom.gridworld import env, render
from jaxtom.gridworld.layout import parse_ascii
from jaxtom.gridworld.render import (
    BACKGROUND, GRID_LINE, HELPER, HUMAN, MARK, PALETTE, TRACE, TRACE_FILL, WALL, render_rgb,
    save_gif, save_png, stencils,
)
from jaxtom.gridworld.types import COLORS, SHAPES, EnvParams, observe

from .conftest import unbatch

CS = 16
PARAMS = EnvParams(height=5, width=6, num_objects=3, max_walls=7)
SCENE = """\
. . . . . .
. # . 1 . .
. . . . . .
0 . H . # .
. . . . P 2"""


@pytest.fixture(scope="module")
def scene():
    layout = parse_ascii(SCENE)
    width = PARAMS.width
    cells = [layout.objects[i][1] * width + layout.objects[i][0] for i in range(3)]
    labels = (jnp.array([COLORS.index("blue"), COLORS.index("yellow"), COLORS.index("purple")]),
              jnp.array([SHAPES.index("square"), SHAPES.index("circle"), SHAPES.index("star")]))
    human, helper = layout.human_pos, layout.helper_pos
    state = env.init_state(jax.random.key(0), jnp.asarray(layout.walls), jnp.array(cells),
                           human[1] * width + human[0], helper[1] * width + helper[0], PARAMS,
                           goal_pair=jnp.array([0, 1]), labels=labels)
    return state.replace(helper_pos=jnp.array([5, 0], jnp.int32))  # on object 2


def cell_pixels(image, x, y, height):
    """The [CS, CS, 3] block of cell (x, y); the image's top row is y = height - 1."""
    row = height - 1 - y
    return np.asarray(image)[row * CS:(row + 1) * CS, x * CS:(x + 1) * CS]


def colours_in(block):
    return {tuple(c) for c in block.reshape(-1, 3).tolist()}


def test_shape_dtype_and_background(scene):
    image = render_rgb(scene, cell_size=CS)
    assert image.shape == (5 * CS, 6 * CS, 3) and image.dtype == jnp.uint8
    empty = cell_pixels(image, 5, 4, 5)
    assert tuple(empty[CS // 2, CS // 2]) == tuple(BACKGROUND)
    assert tuple(empty[0, CS // 2]) == tuple(GRID_LINE)  # thin line on the cell's top edge
    assert tuple(empty[CS // 2, 0]) == tuple(GRID_LINE)


def test_walls_are_dark_and_map_is_not_flipped(scene):
    image = render_rgb(scene, cell_size=CS)
    # Walls at (1, 3) and (4, 1): top-left region and lower right, with y pointing up.
    for x, y in ((1, 3), (4, 1)):
        assert (cell_pixels(image, x, y, 5) == WALL).all()
    for x, y in ((1, 1), (4, 3)):  # their mirror images across the middle row are free
        assert tuple(cell_pixels(image, x, y, 5)[CS // 2, CS // 2]) == tuple(BACKGROUND)


def test_objects_show_their_colour_and_shape(scene):
    image = render_rgb(scene, cell_size=CS)
    masks = stencils(CS)["objects"]
    for obj, (x, y) in enumerate(np.asarray(scene.obj_pos).tolist()):
        block = cell_pixels(image, x, y, 5)
        colour = PALETTE[int(scene.obj_color[obj])]
        mask = masks[int(scene.obj_shape[obj]), 0]
        if (x, y) == tuple(np.asarray(scene.helper_pos).tolist()):
            mask = mask & ~stencils(CS)["helper"]
        assert (block[mask] == colour).all(), f"object {obj} at {(x, y)}"
        assert not (block[~stencils(CS)["objects"][int(scene.obj_shape[obj]), 0]] == colour).all(-1).any()
    # Different shapes have different stencils.
    assert len({masks[s, 0].tobytes() for s in range(len(SHAPES))}) == len(SHAPES)


def test_agents_are_outlines_that_keep_objects_visible(scene):
    image = render_rgb(scene, cell_size=CS)
    human = cell_pixels(image, 2, 1, 5)
    assert (human[stencils(CS)["human"]] == HUMAN).all()
    assert tuple(human[CS // 2, CS // 2]) == tuple(BACKGROUND)
    # The helper stands on object 2 (purple star): red outline, purple inside.
    helper = cell_pixels(image, 5, 0, 5)
    assert (helper[stencils(CS)["helper"]] == HELPER).all()
    assert tuple(helper[CS // 2, CS // 2]) == tuple(PALETTE[COLORS.index("purple")])


def test_carried_object_is_drawn_small_at_its_carrier(scene):
    carrying = scene.replace(human_pos=jnp.array([0, 1]), human_holding=jnp.int32(0))
    carrying = carrying.replace(obj_pos=carrying.obj_pos.at[0].set(jnp.array([0, 1])))
    block = cell_pixels(render_rgb(carrying, cell_size=CS), 0, 1, 5)
    blue = PALETTE[COLORS.index("blue")]
    small = stencils(CS)["objects"][SHAPES.index("square"), 1]
    assert (block[small] == blue).all()
    assert (block == blue).all(-1).sum() == small.sum()
    assert (block[stencils(CS)["human"]] == HUMAN).all()


def test_observation_renders_like_state(scene):
    np.testing.assert_array_equal(render_rgb(observe(scene), cell_size=CS),
                                  render_rgb(scene, cell_size=CS))


def test_trace_dots_only_on_valid_steps(scene):
    positions = jnp.array([[5, 4], [5, 3], [0, 4], [3, 4]])
    mask = jnp.array([True, True, False, True])
    image = render_rgb(scene, cell_size=CS, trace=(positions, mask))
    dot = stencils(CS)["dot"]
    for x, y in ((5, 4), (5, 3), (3, 4)):
        assert (cell_pixels(image, x, y, 5)[dot] == TRACE).all()
    assert not (cell_pixels(image, 0, 4, 5) == TRACE).all(-1).any()
    plain = render_rgb(scene, cell_size=CS, trace=positions)  # no mask: every position
    assert (cell_pixels(plain, 0, 4, 5)[dot] == TRACE).all()


def test_cells_style_one_flat_colour_per_fact(scene):
    """style="cells": objects fill their cells (a carried one its carrier's, under the
    human's border), the path is a fill, the agents are borders; walls as in the figures."""
    carrying = scene.replace(human_pos=jnp.array([0, 1]), human_holding=jnp.int32(0))
    carrying = carrying.replace(obj_pos=carrying.obj_pos.at[0].set(jnp.array([0, 1])))
    trace = (jnp.array([[0, 3], [1, 2], [0, 1]]), jnp.array([True, True, False]))
    image = render_rgb(carrying, cell_size=CS, trace=trace, style="cells")
    masks = stencils(CS)
    inside = ~masks["grid"]
    yellow = cell_pixels(image, 3, 3, 5)  # object 1, on the floor
    assert (yellow[inside] == PALETTE[COLORS.index("yellow")]).all()
    human = cell_pixels(image, 0, 1, 5)  # carrying object 0 (blue)
    assert (human[masks["human_border"] & inside] == HUMAN).all()
    assert (human[~masks["human_border"]] == PALETTE[COLORS.index("blue")]).all()
    helper = cell_pixels(image, 5, 0, 5)  # on object 2 (purple)
    assert (helper[masks["helper_border"]] == HELPER).all()
    assert tuple(helper[CS // 2, CS // 2]) == tuple(PALETTE[COLORS.index("purple")])
    for x, y in ((1, 2), (0, 3)):  # the path's valid steps
        assert (cell_pixels(image, x, y, 5)[inside] == TRACE_FILL).all()
    assert tuple(cell_pixels(image, 2, 2, 5)[CS // 2, CS // 2]) == tuple(BACKGROUND)
    assert (cell_pixels(image, 1, 3, 5)[inside] == WALL).all()
    with pytest.raises(ValueError, match="style must be one of"):
        render_rgb(scene, cell_size=CS, style="bold")
    # marks: a black inner border on valid marked cells only; the rest of the picture as is
    marked = render_rgb(carrying, cell_size=CS, trace=trace, style="cells",
                        marks=(jnp.array([[3, 3], [2, 2]]), jnp.array([True, False])))
    ring = masks["helper_border"]
    assert (cell_pixels(marked, 3, 3, 5)[ring] == MARK).all()
    assert (cell_pixels(marked, 3, 3, 5)[inside & ~ring] == yellow[inside & ~ring]).all()
    changed = (np.asarray(marked) != np.asarray(image)).any(-1)
    assert changed.sum() == ring.sum() and changed.sum() > 0
    with pytest.raises(ValueError, match="marks are drawn in style 'cells' only"):
        render_rgb(scene, cell_size=CS, marks=jnp.array([[3, 3]]))


def test_jit_traces_once_and_vmap_matches(states):
    params = EnvParams()
    compiled = render._render._cache_size()
    first = render_rgb(unbatch(states, 0), cell_size=8)
    second = render_rgb(unbatch(states, 1), cell_size=8)
    assert not np.array_equal(first, second)
    assert render._render._cache_size() == compiled + 1  # one kernel for both episodes
    counted = jax.jit(chex.assert_max_traces(render_rgb, n=1), static_argnames=("cell_size",))
    for i in range(3):
        np.testing.assert_array_equal(counted(unbatch(states, i), cell_size=8),
                                      render_rgb(unbatch(states, i), cell_size=8))
    batch = jax.tree.map(lambda x: x[:4], states)
    images = jax.jit(jax.vmap(lambda s: render_rgb(s, cell_size=8)))(batch)
    assert images.shape == (4, params.height * 8, params.width * 8, 3)
    np.testing.assert_array_equal(images[1], second)


def test_bad_input_names_what_was_expected(scene, states):
    with pytest.raises(ValueError, match="cell_size must be an int >= 4"):
        render_rgb(scene, cell_size=2)
    with pytest.raises(ValueError, match="jax.vmap"):
        render_rgb(states)
    with pytest.raises(ValueError, match=r"trace positions must be \[T, 2\]"):
        render_rgb(scene, trace=jnp.zeros((4, 3), jnp.int32))
    with pytest.raises(ValueError, match="expected an EnvState or Observation"):
        render_rgb(object())
    with pytest.raises(ValueError, match=r"uint8 \[height, width, 3\]"):
        save_png(np.zeros((4, 4), np.uint8), "unused.png")


def test_png_and_gif_round_trip(scene, tmp_path):
    image = np.asarray(render_rgb(scene, cell_size=CS))
    path = save_png(image, tmp_path / "scene.png")
    np.testing.assert_array_equal(np.asarray(Image.open(path).convert("RGB")), image)
    moved = np.asarray(render_rgb(scene.replace(human_pos=jnp.array([3, 3])), cell_size=CS))
    gif = Image.open(save_gif([image, moved, image], tmp_path / "episode.gif", duration_ms=120))
    assert gif.n_frames == 3 and gif.size == (6 * CS, 5 * CS)
    assert gif.info["duration"] == 120
    with pytest.raises(ValueError, match="share one shape"):
        save_gif([image, image[:-1]], tmp_path / "bad.gif")
