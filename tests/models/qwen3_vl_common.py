"""Shared pieces of the Qwen3-VL tests: a tiny transformers checkpoint, inputs, tolerances."""

import jax
import numpy as np
import pytest
import torch

from jaxtom.models.tiny_vl import save_tiny_vl_hf
from jaxtom.models.vl_io import from_pretrained_vl

from tests.tolerance import decoder_depth, decoder_reduction

IMG, START, END = 250, 252, 253
MIN_PIXELS = 32 * 32  # let small test images keep small grids


@pytest.fixture(scope="module")
def tiny_vl(tmp_path_factory):
    path = tmp_path_factory.mktemp("qwen3vl")
    tm = save_tiny_vl_hf(path)
    return path, tm, from_pretrained_vl(path)


def gridworld_image(cell_size: int, seed: int = 0) -> np.ndarray:
    from jaxtom.gridworld import env
    from jaxtom.gridworld.render import render_rgb
    from jaxtom.gridworld.types import EnvParams

    _, state = env.reset(jax.random.key(seed), EnvParams())
    return np.asarray(render_rgb(state, cell_size=cell_size))


_FORWARDS = {}


def forward(model, *args):
    """A jitted full forward, compiled once per model structure and input shapes (the
    parameters are an argument, so a perturbed copy of the model reuses the program)."""
    from flax import nnx

    graphdef, state = nnx.split(model)
    if graphdef not in _FORWARDS:
        _FORWARDS[graphdef] = jax.jit(lambda state, ids, pos, index, vision: nnx.merge(
            graphdef, state)(ids, pos, image_index=index, vision=vision))
    return np.asarray(_FORWARDS[graphdef](state, *args))


def random_images(*shapes, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 256, (*s, 3), dtype=np.uint8) for s in shapes]


def hf_inputs(batch, pre):
    ids = torch.tensor(batch.input_ids, dtype=torch.long)
    return dict(input_ids=ids, pixel_values=torch.tensor(np.concatenate([p for p, _ in pre])),
                image_grid_thw=torch.tensor([list(g) for _, g in pre]),
                mm_token_type_ids=(ids == IMG).int())


def vl_reduction(cfg, seq_len: int, patches: int) -> int:
    """Rounding steps on a path through the whole forward (tests/tolerance.py), summed over
    its chained stages: the patch embedding (patch_dim terms + 4 position taps), each vision
    block (LayerNorm, qkv (d), scores (head_dim), softmax and weighted values (patches
    each), proj (d), LayerNorm, fc1 (d), fc2 (intermediate)), a merger (LayerNorm, 4d
    twice), then the decoder's layers and head."""
    v = cfg.vision
    block = 5 * v.hidden_size + v.head_dim + 2 * patches + v.intermediate_size + 2
    text = decoder_reduction(cfg.text, seq_len) * decoder_depth(cfg.text)
    return v.patch_dim + 4 + v.depth * block + 9 * v.hidden_size + text


def vl_forward_tol(model, batch):
    return dict(reduction=vl_reduction(model.config, batch.input_ids.shape[1],
                                       batch.vision.patches.shape[1]))
