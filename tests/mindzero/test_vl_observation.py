"""The image observation: Figure 7's prompt in its image modality with Qwen3-VL's image item,
the rendered grid as the picture (500x500 px at 50 px per cell -> 256 image tokens), and the
config switch that selects it."""

import re

import jax
import numpy as np
import pytest

from jaxtom.gridworld import EnvParams, generate_episodes
from jaxtom.mindzero import task
from jaxtom.mindzero.observation import (
    HostEpisodes,
    get_observation,
    image_observation,
    observation_image,
)
from jaxtom.models.image_processing import num_image_tokens, preprocess_image
from jaxtom.models.vl_prompts import IMAGE_PAD, IMAGE_PLACEHOLDER
from tests.rl.test_vl_step import tiny_vl_config


@pytest.fixture(scope="module")
def view():
    return HostEpisodes.from_episodes(generate_episodes(jax.random.key(3), EnvParams(), 2))


def test_image_prompt_has_one_image_item_and_no_transcript(view):
    assert get_observation("image") is image_observation
    text = image_observation(view, 0, 2, 2)
    figure = get_observation("figure")(view, 0, 2, 2)
    assert text.count(IMAGE_PAD) == 1 and text.startswith(IMAGE_PLACEHOLDER)
    assert "<image>" not in text and len(text) < len(figure)
    # the request and the output instruction are Figure 7's
    assert figure.endswith(text.rsplit("\n", 1)[-1])
    # image_short: the same picture slot and one line naming the number of goals
    short = get_observation("image_short")(view, 0, 2, 3)
    assert short.count(IMAGE_PAD) == 1 and short.startswith(IMAGE_PLACEHOLDER)
    assert " 3 " in short and len(short) < len(text) / 10
    with pytest.raises(ValueError, match="timestep"):
        get_observation("image_short")(view, 0, 0, 3)


def test_picture_is_the_grid_before_action_t(view):
    a, b = observation_image(view, 0, 1, 50), observation_image(view, 0, 2, 50)
    assert a.shape == (500, 500, 3) and a.dtype == np.uint8
    assert not np.array_equal(a, b)  # the human moved
    cfg = tiny_vl_config()
    _, grid = preprocess_image(a, cfg.vision)
    assert tuple(grid) == (1, 32, 32) and num_image_tokens(grid, cfg.vision) == 256
    with pytest.raises(ValueError, match="timestep"):
        observation_image(view, 0, 0)


def test_picture_shows_the_path_so_far_and_nothing_after(view):
    """Figure 7: "The Human's action trajectory so far is shown in the image": a dot at the
    centre of every cell the human stood on before actions 0..t, none on cells it reaches
    only later."""
    from jaxtom.gridworld.render import TRACE
    cs, e = 20, 0
    t = int(view.length[e]) // 2
    image = observation_image(view, e, t, cs)
    height = image.shape[0] // cs
    cells = [int(c) for c in view.human_cell[e]]
    centre = lambda c: image[(height - 1 - c // 10) * cs + cs // 2, (c % 10) * cs + cs // 2]  # noqa: E731
    occupied = set(int(c) for c in view.obj_cell[e, t]) | {cells[t]}
    before = set(cells[:t + 1]) - occupied
    after = set(cells[t + 1:int(view.length[e])]) - set(cells[:t + 1]) - occupied
    assert before and after
    assert all(np.array_equal(centre(c), TRACE) for c in before)
    assert not any(np.array_equal(centre(c), TRACE) for c in after)


def test_config_selects_and_checks_the_image_observation():
    from jaxtom.config import ConfigError, load_config
    path = "configs/mindzero_gridworld_qwen3vl_tiny.py"
    cfg = load_config(path)
    assert cfg.mindzero.data.observation == "image" and cfg.mindzero.data.image_cell_size == 16
    assert not cfg.step.freeze_vision  # the vision tower trains unless frozen
    frozen = load_config(path, ["step.freeze_vision=true"])
    assert frozen.step.freeze_vision
    # ... during SSRL: the format warm-up is where a from-scratch tower learns to read
    from jaxtom.mindzero.warmup import warmup_step_config
    assert not warmup_step_config(frozen).freeze_vision
    # QA reads pictures too (Table 4a's setting); the closing-count line is the goal task's
    assert load_config("configs/mindzero_qa_tiny.py",
                       ["mindzero.data.observation=image"]).mindzero.data.observation == "image"
    for bad in ("compact_closing", "image_short"):  # image_short's line asks for goals
        with pytest.raises(ConfigError, match="data.observation"):
            task.get(load_config("configs/mindzero_qa_tiny.py",
                                 [f"mindzero.data.observation={bad}"]))
    short = load_config(path, ["mindzero.data.observation=image_short",
                               "mindzero.data.image_style=cells"])
    assert short.mindzero.data.observation == "image_short" and not short.trainer.share_prompts


def test_cells_ranked_outlines_the_partner_the_path_ranked_ahead():
    """style "cells_ranked": the `cells` picture plus a black inner border on the object
    `compact_ranked` writes `>` after (the lead carried and the path separating its first
    listed partner from the second), and on nothing where it writes `|`."""
    from jaxtom.gridworld.render import MARK, stencils
    from jaxtom.mindzero.data import timestep_records
    from jaxtom.mindzero.observation import approach_order, compact_observation, ranked_partner
    view = HostEpisodes.from_episodes(generate_episodes(jax.random.key(5), EnvParams(), 6))
    records = timestep_records(view, 1)
    ranked = [(e, t) for e, t in records if ranked_partner(view, e, t) >= 0]
    plain = [(e, t) for e, t in records if ranked_partner(view, e, t) < 0]
    assert ranked and plain
    cs, ring = 20, stencils(20)["helper_border"]
    for e, t in ranked[:3] + plain[:3]:
        separators = re.split(r" ([|>]) ", compact_observation(view, e, t, 2, closing=True,
                                                                ranked=True))[1::2]
        partner = ranked_partner(view, e, t)
        assert (separators[2] == ">") == (partner >= 0)  # [n=, lead, first partner, ...]
        cells = observation_image(view, e, t, cs, "cells")
        drawn = observation_image(view, e, t, cs, "cells_ranked")
        changed = (cells != drawn).any(-1)
        if partner < 0:
            assert not changed.any()
            continue
        assert partner == approach_order(view, e, t)[1]
        x, y = (int(v) for v in np.asarray(view.state(e, t).obj_pos)[partner])
        rows = slice((10 - 1 - y) * cs, (10 - y) * cs)
        block = drawn[rows, x * cs:(x + 1) * cs]
        assert (block[ring] == MARK).all() and changed.sum() == ring.sum()
    from jaxtom.config import ConfigError, load_config
    with pytest.raises(ConfigError, match="data.image_style"):
        task.get(load_config("configs/mindzero_qa_tiny.py",
                             ["mindzero.data.observation=image",
                              "mindzero.data.image_style=cells_ranked"]))
