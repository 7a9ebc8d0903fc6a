"""Qwen3-VL against transformers: preprocessing, positions, logits, loading, saving."""

import dataclasses

import jax
import numpy as np
import pytest
import torch

from jaxtom.models import image_processing, mrope

from jaxtom.sampling import vl as vl_sampling
from jaxtom.models.qwen3_vl import prepare_batch
from jaxtom.models.tiny_vl import save_tiny_vl_hf
from jaxtom.models.vl_io import from_pretrained_vl, save_pretrained_vl

from tests.tolerance import assert_close, decoder_depth, decoder_reduction, is_close

from .qwen3_vl_common import (  # noqa: F401 (tiny_vl is a fixture)
    END, IMG, MIN_PIXELS, START, forward, gridworld_image, hf_inputs, random_images,
    tiny_vl, vl_forward_tol,
)


def test_preprocessing_matches_transformers_pil_processor():
    """Bit for bit on gridworld pictures: 500x500 (50 px cells, the paper's) -> 256 tokens,
    and a 230x230 one that PIL's bicubic filter resizes to 256x256."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil)

    from jaxtom.models.vl_config import VisionConfig

    def processor(min_pixels):  # Qwen3-VL's preprocessor_config.json at 65536
        return Qwen2VLImageProcessorPil(
            patch_size=16, temporal_patch_size=2, merge_size=2, image_mean=[0.5] * 3,
            image_std=[0.5] * 3, size={"shortest_edge": min_pixels, "longest_edge": 16777216})

    proc = processor(65536)
    vc = VisionConfig(depth=1, hidden_size=32, intermediate_size=64, num_heads=4,
                      out_hidden_size=64, num_position_embeddings=2304,
                      deepstack_visual_indexes=())
    for cell, side, grid in ((50, 500, 32), (23, 230, 16)):
        image = gridworld_image(cell)
        assert image.shape == (side, side, 3)
        ref = proc(images=[image], return_tensors="np")
        ours, thw = image_processing.preprocess_image(image, vc)
        assert thw == (1, grid, grid) == tuple(ref["image_grid_thw"][0])
        assert ours.dtype == np.float32
        np.testing.assert_array_equal(ours, ref["pixel_values"])
    assert image_processing.num_image_tokens((1, 32, 32), vc) == 256
    # the config's pixel range is the processor's `size`: a 1024-pixel floor keeps a
    # 160x160 picture (16 px cells) at its size, one patch per cell, as transformers does
    small = dataclasses.replace(vc, min_pixels=32 * 32)
    image = gridworld_image(16)
    ours, thw = image_processing.preprocess_image(image, small)
    ref = processor(32 * 32)(images=[image], return_tensors="np")
    assert thw == (1, 10, 10) == tuple(ref["image_grid_thw"][0])
    np.testing.assert_array_equal(ours, ref["pixel_values"])
    with pytest.raises(ValueError, match="min_pixels"):
        dataclasses.replace(vc, min_pixels=2 ** 25)


def test_rope_index_matches_transformers(tiny_vl):
    _, tm, model = tiny_vl
    pre = [image_processing.preprocess_image(im, model.config.vision, min_pixels=MIN_PIXELS)
           for im in random_images((64, 96), (100, 50))]
    batch = prepare_batch(model.config, [[5, START, IMG, END, 7, START, IMG, END, 9, 10]],
                          [pre], preprocessed=True)
    inputs = hf_inputs(batch, pre)
    ref_pos, ref_delta = tm.model.get_rope_index(
        inputs["input_ids"], inputs["mm_token_type_ids"], inputs["image_grid_thw"])
    np.testing.assert_array_equal(batch.positions, ref_pos.numpy())
    np.testing.assert_array_equal(batch.rope_deltas, ref_delta.numpy()[:, 0])
    assert batch.rope_deltas[0] < 0  # images take fewer positions than tokens


@pytest.mark.parametrize("shapes", [[(64, 64)], [(64, 96), (128, 64)]],
                         ids=["one-image", "two-images-different-sizes"])
def test_logits_match_transformers(tiny_vl, shapes):
    _, tm, model = tiny_vl
    pre = [image_processing.preprocess_image(im, model.config.vision, min_pixels=MIN_PIXELS)
           for im in random_images(*shapes)]
    prompt = [5, 6]
    for _ in pre:
        prompt += [START, IMG, END, 7]
    prompt += [8, 9]
    batch = prepare_batch(model.config, [prompt], [pre], preprocessed=True)
    if len(pre) == 2:
        assert pre[0][1] != pre[1][1]  # different grids: the second image is padded
        assert not batch.vision.valid.all()
    with torch.no_grad():
        ref = tm(**hf_inputs(batch, pre)).logits.numpy()
    assert np.abs(ref).max() > 1.0, "oracle logits too small for a meaningful test"
    ours = forward(model, batch.input_ids, batch.positions, batch.image_index, batch.vision)
    tol = vl_forward_tol(model, batch)
    bound = assert_close(ours, ref, **tol)
    print(f"max |diff| {np.abs(ours - ref).max():.3g} <= {bound:.3g} on scale "
          f"{np.abs(ref).max():.3g}")
    # what the test can catch: 1-D positions instead of M-RoPE, or no DeepStack
    flat = np.broadcast_to(np.arange(batch.input_ids.shape[1]), batch.positions.shape)
    assert not is_close(forward(model, batch.input_ids, flat, batch.image_index, batch.vision),
                        ref, **tol)
    from flax import nnx

    no_deep = nnx.clone(model)  # DeepStack features zeroed: the mergers' last layer is 0
    no_deep.visual.deepstack.fc2[...] = 0 * no_deep.visual.deepstack.fc2[...]
    no_deep.visual.deepstack.fc2_bias[...] = 0 * no_deep.visual.deepstack.fc2_bias[...]
    assert not is_close(forward(no_deep, batch.input_ids, batch.positions, batch.image_index,
                                batch.vision), ref, **tol)


def test_save_round_trip_loads_in_transformers(tiny_vl, tmp_path):
    from transformers import Qwen3VLForConditionalGeneration

    _, tm, model = tiny_vl
    out = save_pretrained_vl(model, tmp_path / "saved")
    reloaded = Qwen3VLForConditionalGeneration.from_pretrained(str(out)).eval()
    pre = [image_processing.preprocess_image(im, model.config.vision, min_pixels=MIN_PIXELS)
           for im in random_images((64, 64), seed=2)]
    batch = prepare_batch(model.config, [[5, START, IMG, END, 6]], [pre], preprocessed=True)
    with torch.no_grad():  # same float32 weights in the same PyTorch program
        np.testing.assert_array_equal(reloaded(**hf_inputs(batch, pre)).logits.numpy(),
                                      tm(**hf_inputs(batch, pre)).logits.numpy())
    again = from_pretrained_vl(out)
    for a, b in zip(jax.tree.leaves(jax.tree.map(np.asarray, again)),
                    jax.tree.leaves(jax.tree.map(np.asarray, model))):
        np.testing.assert_array_equal(a, b)


def test_bad_inputs_name_the_problem(tiny_vl):
    _, _, model = tiny_vl
    pre = [image_processing.preprocess_image(im, model.config.vision, min_pixels=MIN_PIXELS)
           for im in random_images((64, 64))]
    with pytest.raises(ValueError, match="2 image placeholders.*1 images"):
        prepare_batch(model.config, [[START, IMG, END, START, IMG, END]], [pre],
                      preprocessed=True)
    with pytest.raises(ValueError, match="may not end with an image token"):
        vl_sampling.generate(model, [[5, IMG]], [pre], preprocessed=True, max_new_tokens=2,
                             temperature=0)
    with pytest.raises(ValueError, match="uint8"):
        image_processing.preprocess_image(np.zeros((8, 8, 3), np.float32), model.config.vision)
    assert mrope.mrope_axes(model.config).tolist() == [0, 1, 2, 0, 1, 2, 0, 1]


@pytest.mark.parametrize("name", ["Qwen3-VL-4B-Instruct", "Qwen3-VL-8B-Instruct"])
def test_presets_match_transformers_parameter_count(name):
    """The released architectures: our count, our module's shapes (no allocation) and
    transformers' model (on the meta device) agree; 4B has 4.44B parameters, 8B 8.77B."""
    from flax import nnx
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    from jaxtom.models.qwen3_vl import Qwen3VL
    from jaxtom.models.vl_presets import preset_config, preset_dict

    cfg = preset_config(name)
    with torch.device("meta"):
        hf = Qwen3VLForConditionalGeneration(Qwen3VLConfig(**preset_dict(name)))
    hf_count = sum(p.numel() for p in hf.parameters())
    abstract = nnx.eval_shape(lambda: Qwen3VL(cfg, rngs=nnx.Rngs(0)))
    ours = sum(int(np.prod(x.shape)) for x in jax.tree.leaves(nnx.state(abstract, nnx.Param)))
    assert cfg.num_params() == ours == hf_count
    assert round(hf_count / 1e9, 2) == {"Qwen3-VL-4B-Instruct": 4.44,
                                        "Qwen3-VL-8B-Instruct": 8.77}[name]
    assert cfg.text.rope_theta == 5e6 and cfg.mrope_section == (24, 20, 20)
    assert cfg.text.tie_word_embeddings == (name == "Qwen3-VL-4B-Instruct")


def test_bfloat16_compute_stays_close(tiny_vl):
    _, tm, _ = tiny_vl
    path = tiny_vl[0]
    model = from_pretrained_vl(path, dtype="bfloat16")
    assert str(model.visual.blocks.qkv[...].dtype) == "bfloat16"
    pre = [image_processing.preprocess_image(im, model.config.vision, min_pixels=MIN_PIXELS)
           for im in random_images((64, 64), seed=4)]
    batch = prepare_batch(model.config, [[5, START, IMG, END, 6, 7]], [pre], preprocessed=True)
    ours = forward(model, batch.input_ids, batch.positions, batch.image_index, batch.vision)
    with torch.no_grad():
        ref = tm(**hf_inputs(batch, pre)).logits.numpy()
    assert ours.dtype == np.float32
    assert np.abs(ours - ref).max() < 0.1 * np.abs(ref).max()


def test_tied_embeddings_load_and_match(tmp_path):
    """Qwen3-VL-4B ties its LM head to the embedding (no lm_head tensor in the checkpoint)."""
    from safetensors.numpy import load_file

    tm = save_tiny_vl_hf(tmp_path / "tied", seed=1, tie_word_embeddings=True)
    assert "lm_head.weight" not in load_file(str(tmp_path / "tied" / "model.safetensors"))
    model = from_pretrained_vl(tmp_path / "tied")
    assert model.config.text.tie_word_embeddings and not hasattr(model.language_model,
                                                                  "lm_head")
    pre = [image_processing.preprocess_image(im, model.config.vision, min_pixels=MIN_PIXELS)
           for im in random_images((64, 64), seed=7)]
    batch = prepare_batch(model.config, [[5, START, IMG, END, 6, 7]], [pre], preprocessed=True)
    with torch.no_grad():
        ref = tm(**hf_inputs(batch, pre)).logits.numpy()
    ours = forward(model, batch.input_ids, batch.positions, batch.image_index, batch.vision)
    assert_close(ours, ref, **vl_forward_tol(model, batch))


def test_text_only_batch_runs_like_a_decoder(tiny_vl):
    """Called like `Decoder` (ids, [B, T] positions, segment ids): a text-only batch gives
    transformers' text-only logits, and packed segments do not see each other."""
    _, tm, model = tiny_vl
    ids = np.random.default_rng(10).integers(0, 240, (2, 12))
    with torch.no_grad():
        ref = tm(input_ids=torch.tensor(ids)).logits.numpy()
    ours = np.asarray(jax.jit(lambda ids: model(ids))(ids))
    tol = dict(reduction=decoder_reduction(model.config.text, 12),
               depth=decoder_depth(model.config.text))
    assert_close(ours, ref, **tol)
    # two sequences packed in one row: the second (positions restarting at 0) = alone
    packed = np.concatenate([ids[0, :5], ids[1, :7]])[None]
    positions = np.concatenate([np.arange(5), np.arange(7)])[None]
    segments = np.asarray([[0] * 5 + [1] * 7])
    out = np.asarray(jax.jit(lambda i, p, s: model(i, p, s))(packed, positions, segments))
    with torch.no_grad():
        alone = tm(input_ids=torch.tensor(ids[1:, :7])).logits.numpy()
    assert_close(out[:, 5:], alone, **tol)
