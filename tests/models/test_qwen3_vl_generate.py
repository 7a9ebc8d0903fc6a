"""Qwen3-VL generation, sharding, batching and the training path."""

import jax
import numpy as np
import pytest
import torch

from jaxtom.models import image_processing

from jaxtom.sampling import vl as vl_sampling
from jaxtom.models.qwen3_vl import prepare_batch
from jaxtom.models.vl_io import from_pretrained_vl, save_pretrained_vl

from tests.tolerance import assert_close, float32_tol, is_close

from .qwen3_vl_common import (  # noqa: F401 (tiny_vl is a fixture)
    END, IMG, MIN_PIXELS, START, forward, hf_inputs, random_images, tiny_vl,
    vl_forward_tol, vl_reduction,
)


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
    from jaxtom.sampling import vl as vl_sampling
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


def test_sampler_logprobs_equal_the_training_forward(tiny_vl):
    """GRPO's first importance ratio is 1 only if the sampler (prompt cached at positions
    shifted by the rope delta) and the training forward (prompt + completion, unshifted
    M-RoPE positions) give the same log-probabilities to the sampled tokens."""
    _, _, model = tiny_vl
    pre = [image_processing.preprocess_image(im, model.config.vision, min_pixels=MIN_PIXELS)
           for im in random_images((64, 96), (128, 64), seed=11)]
    prompt = [5, START, IMG, END, 6, START, IMG, END, 7]
    # greedy (logprobs are still at temperature 1): shares the programs of the greedy test
    result = vl_sampling.generate(model, [prompt], [pre], preprocessed=True, max_new_tokens=8,
                                  temperature=0)
    completion = result.sequences()[0]
    batch = prepare_batch(model.config, [prompt + completion], [pre], preprocessed=True)
    assert batch.rope_deltas[0] < 0  # the shift is real
    logits = forward(model, batch.input_ids, batch.positions, batch.image_index, batch.vision)
    logp = jax.nn.log_softmax(logits[0])
    n = len(completion)
    start = batch.lengths[0] - n - 1  # the position predicting the first completion token
    ours = np.asarray(logp)[np.arange(start, start + n), completion]
    tol = vl_forward_tol(model, batch)
    # log-softmax adds a sum over the vocabulary; scale: the logits' magnitude
    assert_close(result.logprobs[0][:n], ours, reduction=tol["reduction"] + 256,
                 scale=np.abs(logits).max())


def test_compacted_decoding_of_image_prompts_keeps_every_token(tiny_vl):
    """`trainer.compact_rows` on the image path: `vl_sampling.generate` resumes from its
    image prefill, and dropping finished rows must give the single loop's tokens."""
    _, _, model = tiny_vl
    pre = [image_processing.preprocess_image(im, model.config.vision, min_pixels=MIN_PIXELS)
           for im in random_images((64, 96), (100, 50), (48, 48), (80, 40), seed=3)]
    prompts = [[5 + i, START, IMG, END, 7 + i] for i in range(4)]
    kw = dict(preprocessed=True, max_new_tokens=70, temperature=1.0, key=jax.random.key(2))
    probe = vl_sampling.generate(model, prompts, [[p] for p in pre], **kw)
    stop = int(np.bincount(probe.tokens[:, :40].ravel()).argmax())
    single = vl_sampling.generate(model, prompts, [[p] for p in pre], stop=[stop], **kw)
    compact = vl_sampling.generate(model, prompts, [[p] for p in pre], stop=[stop],
                                   compact=True, **kw)
    assert len(set(single.lengths.tolist())) > 1
    np.testing.assert_array_equal(compact.tokens, single.tokens)
    np.testing.assert_array_equal(compact.lengths, single.lengths)
