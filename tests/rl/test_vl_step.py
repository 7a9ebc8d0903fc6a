"""The GRPO update through a Qwen3-VL policy: image+text rows (`rl.vl_batch`) carry their
images and M-RoPE positions into the forward, splits and padding keep them with their rows,
and `freeze_vision` keeps the vision tower fixed."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxtom.models.config import ModelConfig
from jaxtom.models.mrope import expand_image_tokens
from jaxtom.models.qwen3_vl import init_qwen3_vl, prepare_batch
from jaxtom.models.vl_config import VisionConfig, VLConfig
from jaxtom.rl import StepConfig
from jaxtom.rl.step import Learner
from jaxtom.rl.vl_batch import preprocess_images, vl_rows
from tests.models.qwen3_vl_common import vl_reduction
from tests.tolerance import assert_close


def tiny_vl_config() -> VLConfig:
    text = ModelConfig(family="qwen3", vocab_size=64, hidden_size=32, intermediate_size=64,
                       num_layers=2, num_heads=4, num_kv_heads=2, head_dim=8, qk_norm=True,
                       max_position_embeddings=1024)
    vision = VisionConfig(depth=2, hidden_size=16, intermediate_size=32, num_heads=2,
                          out_hidden_size=32, num_position_embeddings=16,
                          deepstack_visual_indexes=(0, 1))
    return VLConfig(text=text, vision=vision, image_token_id=60, vision_start_token_id=61,
                    vision_end_token_id=62, mrope_section=(1, 1, 2))


def rows(cfg, seed=0):
    rng = np.random.default_rng(seed)
    # two distinct images (64x64 and 64x96 px) over 4 rows, prompts of two lengths
    ims = [rng.integers(0, 256, (64, 64, 3), np.uint8), rng.integers(0, 256, (64, 96, 3), np.uint8)]
    pre = preprocess_images([[im] for im in ims], cfg)
    seqs, masks, images = [], [], []
    for r in range(4):
        (patches, grid), = pre[r % 2]
        prompt = [1, 2, cfg.vision_start_token_id, cfg.image_token_id,
                  cfg.vision_end_token_id] + [3] * (r + 1)
        prompt = expand_image_tokens(prompt, [grid], cfg)
        completion = rng.integers(1, 50, 5).tolist()
        seqs.append(prompt + completion)
        masks.append([0.0] * len(prompt) + [1.0] * len(completion))
        images.append([ims[r % 2]])
    return seqs, masks, images


def test_vl_rows_logprobs_equal_the_models_forward():
    """The learner's log-probs of image+text rows (per-row images, [R, 3, T] positions) equal
    the model's own forward on `prepare_batch` inputs (one flat image set)."""
    cfg = tiny_vl_config()
    model = init_qwen3_vl(cfg, seed=0)
    seqs, masks, images = rows(cfg)
    batch = vl_rows(cfg, seqs, masks, [1.0, -1.0, 0.5, -0.5], [0, 0, 1, 1], images,
                    row_len=128, num_patches=384)
    assert batch.positions.shape == (4, 3, 128) and batch.vision.patches.shape[:3] == (4, 1, 384)
    learner = Learner(model, StepConfig(kl_coef=0.0), total_steps=1000)
    state = learner.init_state(model)
    got = np.asarray(learner.logprobs(state, batch))
    ref = prepare_batch(cfg, seqs, images, seq_len=128)
    logits = model(ref.input_ids, ref.positions, image_index=ref.image_index, vision=ref.vision)
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), -1)
    want = np.zeros_like(got)
    want[:, 1:] = np.take_along_axis(np.asarray(logp[:, :-1]), ref.input_ids[:, 1:, None],
                                     -1)[..., 0]
    real = np.asarray(batch.segment_ids) > 0
    real[:, 0] = False
    # the VL forward, then a log-softmax over the vocabulary
    reduction = vl_reduction(cfg, 128, ref.vision.patches.shape[1]) + cfg.text.vocab_size
    assert_close(got[real], want[real], reduction=reduction)


def test_a_sampled_image_placeholder_in_a_completion_is_text():
    """A policy may sample the image placeholder id; the sampler embedded it as text, so
    the update's row reads it as text (no image slot, text positions) instead of failing on
    a picture count it was never given, and everything else is as with another token."""
    cfg = tiny_vl_config()
    seqs, masks, images = rows(cfg)
    other = [list(s) for s in seqs]
    for s in seqs[:2]:
        s[-3] = cfg.image_token_id  # a sampled placeholder in two completions
    got = vl_rows(cfg, seqs, masks, [1.0] * 4, [0, 0, 1, 1], images, row_len=128,
                  num_patches=384)
    ref = vl_rows(cfg, other, masks, [1.0] * 4, [0, 0, 1, 1], images, row_len=128,
                  num_patches=384)
    for i, s in enumerate(seqs[:2]):
        at = len(s) - 3
        assert got.tokens[i, at] == cfg.image_token_id and got.image_index[i, at] == -1
        assert (np.asarray(got.image_index)[i] >= 0).sum() == (
            np.asarray(ref.image_index)[i] >= 0).sum() > 0
    np.testing.assert_array_equal(got.positions, ref.positions)
    np.testing.assert_array_equal(got.image_index, ref.image_index)
    tail = np.asarray(got.positions)[0, :, len(seqs[0]) - 5:len(seqs[0])]
    assert (tail == tail[0]).all() and (np.diff(tail[0]) == 1).all()  # text: one step each


@pytest.mark.slow  # two compiled VL updates: ~30 s on 2 busy cores
def test_vl_micro_batches_pad_and_split_rows_with_their_images():
    """Three micro-batches over 4 rows (2 padding rows, padding images) give the gradient
    of one pass: each row's images travel with it through padding and splitting."""
    cfg = tiny_vl_config()
    model = init_qwen3_vl(cfg, seed=0)
    seqs, masks, images = rows(cfg)
    batch = vl_rows(cfg, seqs, masks, [1.0, -1.0, 0.5, -0.5], [0, 0, 1, 1], images,
                    row_len=128, num_patches=384)
    step = StepConfig(kl_coef=0.01, learning_rate=1e-2)
    whole, micro = Learner(model, step, total_steps=1000), Learner(model, dataclasses.replace(step,
                                                                            micro_batches=3), total_steps=1000)
    state = whole.init_state(model)
    a = whole.gradients(state, whole.put_batch(batch))[0]
    b = micro.gradients(state, micro.put_batch(batch))[0]
    # forward + backward (depth 2) of the whole VL path, summed in another order
    reduction = vl_reduction(cfg, 128, 384) + cfg.text.vocab_size
    for x, y in zip(jax.tree.leaves(b), jax.tree.leaves(a)):
        assert np.all(np.isfinite(np.asarray(x)))
        assert_close(x, y, reduction=reduction, depth=2, scale=float(np.abs(y).max()) + 1e-30)


@pytest.mark.slow  # two compiled VL updates: ~40 s on 2 busy cores
def test_freeze_vision_trains_only_the_text_side():
    cfg = tiny_vl_config()
    seqs, masks, images = rows(cfg)
    batch = vl_rows(cfg, seqs, masks, [1.0, -1.0, 0.5, -0.5], [0, 0, 1, 1], images,
                    row_len=128, num_patches=384)
    flat = lambda m: {jax.tree_util.keystr(k): np.asarray(v) for k, v in  # noqa: E731
                      jax.tree_util.tree_leaves_with_path(nnx.state(m, nnx.Param))}
    start = flat(init_qwen3_vl(cfg, seed=0))
    for freeze in (False, True):
        model = init_qwen3_vl(cfg, seed=0)
        learner = Learner(model, StepConfig(kl_coef=0.0, learning_rate=1e-2,
                                            freeze_vision=freeze), total_steps=1000)
        state = learner.init_state(model)
        state, metrics = learner.update(state, learner.put_batch(batch))
        assert float(metrics["skipped"]) == 0 and np.isfinite(float(metrics["grad_norm"]))
        after = flat(learner.model(state))
        moved = {k: not np.array_equal(after[k], v) for k, v in start.items()}
        visual = [m for k, m in moved.items() if "visual" in k]
        text = [m for k, m in moved.items() if "visual" not in k]
        assert visual and any(text)
        assert (not any(visual)) if freeze else any(visual)
