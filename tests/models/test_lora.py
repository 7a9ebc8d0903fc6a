"""LoRA: zero-initialised B is exact, gradients reach only adapters, merge is exact."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxtom import models
from tests.tolerance import assert_close, decoder_depth, decoder_reduction, is_close


@pytest.fixture
def base(tiny_checkpoints):
    return models.from_pretrained(tiny_checkpoints["qwen3-gqa"][0])


def test_zero_b_gives_base_logits_exactly(base):
    ids = np.arange(20)[None] % 256
    before = np.asarray(base(ids))
    adapted = models.add_lora(nnx.clone(base), rank=4, alpha=8,
                              targets=("q_proj", "v_proj", "down_proj"), key=jax.random.key(3))
    assert np.array_equal(np.asarray(adapted(ids)), before)


def test_only_lora_params_get_gradients_and_merge_matches(base, tmp_path):
    ids = jnp.asarray(np.random.default_rng(0).integers(0, 256, (2, 9)))
    ids_np = np.asarray(ids)
    base_logits = np.asarray(base(ids_np))
    model = models.add_lora(base, rank=2, targets=("q_proj", "o_proj", "up_proj"))

    def loss(m):
        logp = jax.nn.log_softmax(m(ids[:, :-1]))
        return -jnp.take_along_axis(logp, ids[:, 1:, None], -1).mean()

    grads = nnx.grad(loss, argnums=nnx.DiffState(0, nnx.LoRAParam))(model)
    names = {".".join(map(str, p)) for p, _ in nnx.to_flat_state(grads)}
    assert names == {f"layers.{t}_lora_{ab}" for t in ("q_proj", "o_proj", "up_proj")
                     for ab in "ab"}
    # B gets a non-zero gradient (A does not yet, since B = 0)
    assert float(jnp.abs(grads["layers"]["up_proj_lora_b"][...]).max()) > 0

    # take a step on the adapters only, then merged export equals the adapted model
    lora_state = nnx.state(model, nnx.LoRAParam)
    nnx.update(model, jax.tree.map(lambda p, g: p - 0.5 * g, lora_state, grads))
    adapted = np.asarray(model(ids_np))
    merged = models.merge_lora(model)
    assert not any("lora" in ".".join(map(str, p))
                   for p, _ in nnx.to_flat_state(nnx.state(merged)))
    # merging reassociates x (W + s A B) vs x W + s (x A) B: float32 rounding of a decoder
    # forward (tests/tolerance.py), plus the rank-2 sum and two ops of each adapter path
    cfg = model.config
    close = dict(reduction=decoder_reduction(cfg, ids.shape[1]) + 2 + 2,
                 depth=decoder_depth(cfg))
    tol = assert_close(merged(ids_np), adapted, **close)
    reloaded = models.from_pretrained(models.save_pretrained(model, tmp_path / "m"))
    assert_close(reloaded(ids_np), adapted, **close)
    # the tolerance catches a merge that drops the adapters, halves their scale or flips it
    assert np.abs(adapted - base_logits).max() > 10 * tol
    for factor in (0.5, -1.0):
        wrong = nnx.clone(model)
        wrong.layers.lora_scale = tuple((t, s * factor) for t, s in wrong.layers.lora_scale)
        assert not is_close(models.merge_lora(wrong)(ids_np), adapted, **close), factor


def test_bad_lora_arguments(base):
    with pytest.raises(ValueError, match="unknown LoRA targets"):
        models.add_lora(base, rank=2, targets=("qkv",))
    with pytest.raises(ValueError, match="positive"):
        models.add_lora(base, rank=0)
