"""The image observation (`mindzero.data.observation="image"`): Figure 7's assistance prompt
with the rendered grid as its picture, for a vision-language policy (Qwen3-VL).

The text is the `figure` observation in its image modality (no transcript: the model must
read the state from the picture), with the prompt's `<image>` slot written as Qwen3-VL's
image item (`<|vision_start|><|image_pad|><|vision_end|>`); the picture is
`gridworld.render_rgb` of the state before action t with the human's path so far drawn as
dots (the prompt says "The Human's action trajectory so far is shown in the image"; 500x500
px at the paper's 50 px per cell: 256 LLM tokens). The text function is registered as an
observation like the others, so tokenizer corpora and row-length bounds read it as they read
any prompt.
"""

from __future__ import annotations

import numpy as np

from jaxtom.gridworld.text import IMAGE_TOKEN, assistance_prompt
from jaxtom.mindzero.config import IMAGE_STYLES
from jaxtom.mindzero.observation import HostEpisodes, approach_order, partner_ranks
from jaxtom.models.vl_prompts import IMAGE_PLACEHOLDER


def image_observation(view: HostEpisodes, e: int, t: int, num_particles: int) -> str:
    """The prompt text, with one image placeholder where the picture goes. `view`: anything
    with `state(e, t)` (held-out episodes, or the live rows of online assistance)."""
    text = assistance_prompt(view.state(e, t), None, num_particles, modality="image")
    if text.count(IMAGE_TOKEN) != 1:
        raise ValueError(f"the image prompt must have one {IMAGE_TOKEN} slot, found "
                         f"{text.count(IMAGE_TOKEN)}")
    return text.replace(IMAGE_TOKEN, IMAGE_PLACEHOLDER)


def short_image_observation(view: HostEpisodes, e: int, t: int, num_particles: int) -> str:
    """The picture and one line asking for `num_particles` goals (`observation=
    "image_short"`): for a model trained from scratch, as the text default reads a compact
    line instead of Figure 7. Figure 7's text is the same in every prompt of a run with the
    Figure 7 label set (139 of a row's ~275 tokens on the CPU image default), so it costs
    compute and tells such a model nothing; the answer format comes from the warm-up."""
    view.check_step(e, t)
    return f"{IMAGE_PLACEHOLDER}\nthe human's {int(num_particles)} most likely goals :"


IMAGE_OBSERVATIONS = {"image": image_observation, "image_short": short_image_observation}


def ranked_partner(view: HostEpisodes, e: int, t: int) -> int:
    """The object the human's path has ranked ahead as the carried lead's partner (the
    `compact_ranked` observation's `>` after its first listed partner), or -1 where the path
    has not separated the partners (or nothing is carried). Observed states only."""
    order = approach_order(view, e, t)
    return order[1] if partner_ranks(view, e, t, order)[1:2] == [">"] else -1


def observation_image(view: HostEpisodes, e: int, t: int, cell_size: int = 50,
                      style: str = "figure") -> np.ndarray:
    """uint8 [H, W, 3]: the grid before action index t, `cell_size` px per cell, with every
    cell the human stood on before actions 0..t marked (its trajectory so far), drawn in
    `style`: the paper's "figure" or flat "cells" (`gridworld.render_rgb`), or
    "cells_ranked", the cells with `ranked_partner`'s object outlined. That outline is the
    picture's `compact_ranked`: a from-scratch tower does not learn to read the partner from
    the direction of the path within the CPU budget, and the text default reads this
    evidence as one token too. The trace is the episode's whole
    row of cells under a mask, so every step renders with one program."""
    from jaxtom.gridworld import render_rgb
    if style not in IMAGE_STYLES:
        raise ValueError(f"image style must be one of {IMAGE_STYLES}, got {style!r}")
    state = view.state(e, t)
    width = int(np.shape(state.layout.walls)[1])
    cells = np.asarray(view.human_cell[e])
    trace = (np.stack([cells % width, cells // width], axis=1), np.arange(len(cells)) <= t)
    marks = None
    if style == "cells_ranked":
        partner = ranked_partner(view, e, t)
        marks = (np.asarray(state.obj_pos)[max(partner, 0)][None], np.array([partner >= 0]))
    return np.asarray(render_rgb(state, cell_size=cell_size, trace=trace,
                                 style="figure" if style == "figure" else "cells",
                                 marks=marks))
