"""Qwen3-VL: preprocessing, positions, logits and greedy generation against transformers."""

import jax
import numpy as np
import pytest
import torch

from jaxtom.models import image_processing, mrope, vl_sampling
from jaxtom.models.qwen3_vl import prepare_batch
from jaxtom.models.tiny_vl import save_tiny_vl_hf
from jaxtom.models.vl_io import from_pretrained_vl, save_pretrained_vl

from tests.tolerance import (
    assert_close, decoder_depth, decoder_reduction, float32_tol, is_close,
)

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


def test_preprocessing_matches_transformers_pil_processor():
    """Bit for bit on gridworld pictures: 500x500 (50 px cells, the paper's) -> 256 tokens,
    and a 230x230 one that PIL's bicubic filter resizes to 256x256."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import (
        Qwen2VLImageProcessorPil)

    from jaxtom.models.vl_config import VisionConfig

    proc = Qwen2VLImageProcessorPil(  # Qwen3-VL's preprocessor_config.json
        patch_size=16, temporal_patch_size=2, merge_size=2, image_mean=[0.5] * 3,
        image_std=[0.5] * 3, size={"shortest_edge": 65536, "longest_edge": 16777216})
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


def test_greedy_generation_matches_transformers(tiny_vl):
    _, tm, model = tiny_vl
    pre = [image_processing.preprocess_image(im, model.config.vision, min_pixels=MIN_PIXELS)
           for im in random_images((64, 96), (100, 50), seed=1)]
    prompt = [5, 6, START, IMG, END, 7, 8, START, IMG, END, 9, 10, 11]
    result = vl_sampling.generate(model, [prompt], [pre], preprocessed=True,
                                  max_new_tokens=16, temperature=0)
    batch = prepare_batch(model.config, [prompt], [pre], preprocessed=True)
    with torch.no_grad():
        out = tm.generate(**hf_inputs(batch, pre), max_new_tokens=16, min_new_tokens=16,
                          do_sample=False)
    ref = out[0, batch.input_ids.shape[1]:].tolist()
    assert len(ref) == 16
    assert result.sequences()[0] == ref


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


SHARDED_SCRIPT = """
import json, sys
import jax, numpy as np
jax.config.update("jax_default_matmul_precision", "highest")
from flax import nnx
from jaxtom import models, parallel
from jaxtom.models import image_processing
from jaxtom.models.qwen3_vl import prepare_batch

path = sys.argv[1]
one = models.from_pretrained(path)
mesh = parallel.make_mesh(2, 2, 2)
sharded = models.from_pretrained(path, mesh=mesh)
rng = np.random.default_rng(0)
shapes = [(64, 64), (64, 96), (128, 64), (96, 96)]
images = [[image_processing.preprocess_image(rng.integers(0, 256, (*s, 3), dtype=np.uint8),
                                             one.config.vision, min_pixels=32 * 32)]
          for s in shapes]
prompts = [[5, 252, 250, 253] + list(range(6, 6 + i)) for i in range(4)]
batch = prepare_batch(one.config, prompts, images, preprocessed=True)

def forward(model, mesh=None):
    graphdef, state = nnx.split(model)
    f = jax.jit(lambda state, ids, pos, index, vision: nnx.merge(graphdef, state)(
        ids, pos, image_index=index, vision=vision, mesh=mesh))
    ids, index = batch.input_ids, batch.image_index
    if mesh is not None:
        ids, index = parallel.shard_batch((ids, index), mesh)
    return f(state, ids, batch.positions, index, batch.vision)

ref = np.asarray(forward(one))
out = forward(sharded, mesh)
gen = None
if GENERATE:
    from jaxtom.models import vl_sampling
    gen = [vl_sampling.generate(m, prompts, images, preprocessed=True, max_new_tokens=4,
                                temperature=0).sequences() for m in (one, sharded)]
qkv = sharded.visual.blocks.qkv[...].sharding.spec
q_proj = sharded.language_model.layers.q_proj[...].sharding.spec
print("RESULT " + json.dumps({
    "diff": float(np.abs(np.asarray(out) - ref).max()), "scale": float(np.abs(ref).max()),
    "seq": int(batch.input_ids.shape[1]), "patches": int(batch.vision.patches.shape[1]),
    "out_spec": str(out.sharding.spec), "qkv_spec": str(qkv), "q_proj_spec": str(q_proj),
    "generated": gen}))
"""


def run_sharded(path, generate: bool) -> dict:
    from tests.simulated import run_on_devices

    script = SHARDED_SCRIPT.replace("sys.argv[1]", repr(str(path)))
    return run_on_devices(script.replace("GENERATE", repr(generate)), 8, timeout=600)


def test_sharded_forward_on_8_devices_equals_one_device(tiny_vl):
    """Parameters sharded over (data 2, fsdp 2, tensor 2) of 8 simulated CPU devices and the
    batch over data x fsdp: the same logits as on one device, to float32 rounding."""
    path, _, model = tiny_vl
    out = run_sharded(path, generate=False)
    assert "fsdp" in out["qkv_spec"] and "tensor" in out["qkv_spec"], out
    assert "tensor" in out["q_proj_spec"], out
    assert "data" in out["out_spec"], out  # logits stay sharded over the batch
    bound = float32_tol(out["scale"], vl_reduction(model.config, out["seq"], out["patches"]))
    print(f"sharded vs one device: max |diff| {out['diff']:.3g} <= {bound:.3g}")
    assert out["scale"] > 1.0 and out["diff"] <= bound


@pytest.mark.slow
def test_sharded_generation_on_8_devices_equals_one_device(tiny_vl):
    """Greedy image+text generation (4 rows, 4 images of 3 sizes) with the model and the
    KV cache sharded over 8 simulated devices gives the one-device tokens."""
    one, sharded = run_sharded(tiny_vl[0], generate=True)["generated"]
    assert [len(r) for r in one] == [4] * 4 and sharded == one


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


def vl_grads(model, remat: str):
    """Gradients of a next-token loss on a two-row, two-image batch."""
    import jax.numpy as jnp
    from flax import nnx

    pre = [image_processing.preprocess_image(im, model.config.vision, min_pixels=MIN_PIXELS)
           for im in random_images((64, 64), (64, 96), seed=3)]
    batch = prepare_batch(model.config, [[5, START, IMG, END, 6, 7], [START, IMG, END, 8, 9]],
                          [pre[:1], pre[1:]], preprocessed=True)
    targets = np.roll(batch.input_ids, -1, axis=1)
    m = nnx.clone(model)
    m.language_model.config = m.language_model.config.replace(remat=remat)
    graphdef, state = nnx.split(m)

    def loss(state):
        logits = nnx.merge(graphdef, state)(batch.input_ids, batch.positions,
                                            image_index=batch.image_index,
                                            vision=batch.vision)
        logp = jax.nn.log_softmax(logits)
        return -jnp.take_along_axis(logp, targets[..., None], -1).mean()

    return dict(nnx.to_flat_state(jax.jit(jax.grad(loss))(state)))


def test_gradients_reach_the_vision_tower(tiny_vl):
    """The training forward differentiates through the tower (trained, as MindZero's public
    config does), rematerialised: every vision parameter group gets a finite, nonzero grad."""
    grads = vl_grads(tiny_vl[2], "layer")
    for path in (("visual", "patch_embed"), ("visual", "blocks", "qkv"),
                 ("visual", "deepstack", "fc2"), ("visual", "pos_embed"),
                 ("visual", "merger", "fc1")):
        g = np.asarray(grads[path].get_value())
        assert np.isfinite(g).all() and np.abs(g).max() > 0, path


@pytest.mark.slow
def test_remat_changes_no_gradient(tiny_vl):
    model = tiny_vl[2]
    plain, remat = vl_grads(model, "none"), vl_grads(model, "layer")
    assert plain.keys() == remat.keys()
    for path, a in plain.items():
        a, b = np.asarray(a.get_value()), np.asarray(remat[path].get_value())
        # float32 rounding of a forward and a backward (depth 2) in another fusion order
        assert_close(b, a, reduction=vl_reduction(model.config, 6, 24), depth=2,
                     scale=max(np.abs(a).max(), 1e-30), err_msg=str(path))


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


def test_image_sizes_share_bucketed_prefill_programs(tiny_vl):
    """Images of different sizes and counts within one bucket reuse the compiled prefill."""
    _, _, model = tiny_vl
    vl_sampling.TRACE_COUNT["prefill"] = 0
    outs = []
    # 16, 24, 24 patches (4, 6, 6 tokens; the text pads the prompts to one length bucket)
    for shapes, text in [([(64, 64)], [6, 7, 8]), ([(64, 96)], [6]), ([(96, 64)], [6])]:
        images = random_images(*shapes, seed=5)
        pre = [image_processing.preprocess_image(im, model.config.vision, min_pixels=MIN_PIXELS)
               for im in images]
        outs.append(vl_sampling.generate(model, [[5, START, IMG, END] + text], [pre],
                                         preprocessed=True, max_new_tokens=3, temperature=0))
    assert vl_sampling.TRACE_COUNT["prefill"] == 1
    assert all(len(o.sequences()[0]) == 3 for o in outs)


def test_mixed_batch_rows_generate_as_alone(tiny_vl):
    """A batch of a two-image row, a text-only row and a one-image row: each row's greedy
    tokens equal transformers' generation for that row alone (rows keep their own images,
    positions and rope deltas)."""
    _, tm, model = tiny_vl
    vc = model.config.vision
    images = random_images((64, 96), (128, 64), (64, 64), seed=6)
    pre = [image_processing.preprocess_image(im, vc, min_pixels=MIN_PIXELS) for im in images]
    prompts = [[5, START, IMG, END, 6, START, IMG, END, 7], [8, 9, 10, 11], [START, IMG, END, 12]]
    rows = [pre[:2], [], pre[2:]]
    result = vl_sampling.generate(model, prompts, rows, preprocessed=True, max_new_tokens=8,
                                  temperature=0)
    for b, (prompt, imgs) in enumerate(zip(prompts, rows)):
        batch = prepare_batch(model.config, [prompt], [imgs], preprocessed=True)
        ids = torch.tensor(batch.input_ids, dtype=torch.long)
        kwargs = hf_inputs(batch, imgs) if imgs else {"input_ids": ids}
        with torch.no_grad():
            out = tm.generate(**kwargs, max_new_tokens=8, min_new_tokens=8, do_sample=False)
        assert result.sequences()[b] == out[0, ids.shape[1]:].tolist(), b


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


def test_lora_on_the_text_decoder_saves_merged(tiny_vl, tmp_path):
    """LoRA adapters go on the VL model's text decoder in place; the forward sees them and
    saving folds them in, so the reloaded checkpoint gives the adapted logits."""
    from flax import nnx

    from jaxtom.models import add_lora

    model = nnx.clone(tiny_vl[2])
    add_lora(model.language_model, rank=2, key=jax.random.key(1))
    b = model.language_model.layers.q_proj_lora_b
    b[...] = 0.5 * jax.random.normal(jax.random.key(2), b[...].shape)
    pre = [image_processing.preprocess_image(im, model.config.vision, min_pixels=MIN_PIXELS)
           for im in random_images((64, 64), seed=8)]
    batch = prepare_batch(model.config, [[5, START, IMG, END, 6, 7]], [pre], preprocessed=True)
    args = (batch.input_ids, batch.positions, batch.image_index, batch.vision)
    adapted, base = forward(model, *args), forward(tiny_vl[2], *args)
    tol = vl_forward_tol(model, batch)
    assert not is_close(adapted, base, **tol)
    reloaded = from_pretrained_vl(save_pretrained_vl(model, tmp_path / "merged"))
    assert_close(forward(reloaded, *args), adapted, **tol)
    head, axis = model.head_weight()  # what the GRPO step applies to hidden states
    assert (head.shape[axis], head.shape[1 - axis]) == (256, 64)


def test_identical_images_are_encoded_once(tiny_vl):
    """A GRPO group repeats one prompt: its image goes through the tower once, and every
    row's logits are those of the row alone."""
    _, _, model = tiny_vl
    image, other = random_images((64, 96), (64, 64), seed=9)
    prompts = [[5, START, IMG, END, 6], [5, START, IMG, END, 6], [7, START, IMG, END, 8]]
    batch = prepare_batch(model.config, prompts, [[image], [image.copy()], [other]])
    assert batch.vision.patches.shape[0] == 2  # two distinct images
    assert (batch.image_index[0] == batch.image_index[1]).all()
    logits = forward(model, batch.input_ids, batch.positions, batch.image_index, batch.vision)
    alone = prepare_batch(model.config, prompts[2:], [[other]],
                          num_patches=batch.vision.patches.shape[1])
    seq = alone.input_ids.shape[1]
    ref = forward(model, alone.input_ids, alone.positions, alone.image_index, alone.vision)
    np.testing.assert_array_equal(logits[0], logits[1])
    assert_close(logits[2, :seq], ref[0], **vl_forward_tol(model, batch))


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
