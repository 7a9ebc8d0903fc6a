"""Logit parity with transformers (PyTorch CPU) and the save -> transformers round trip."""

import json

import numpy as np
import pytest
import torch

from jaxtom import models
from jaxtom.models.decoder import KVCache

from .conftest import PARITY_CONFIGS


def torch_logits(tm, ids):
    with torch.no_grad():
        return tm(torch.tensor(np.asarray(ids))).logits.numpy()


@pytest.mark.parametrize("name", sorted(PARITY_CONFIGS))
def test_logits_match_transformers(tiny_checkpoints, name):
    path, tm = tiny_checkpoints[name]
    model = models.from_pretrained(path)
    ids = np.random.default_rng(0).integers(0, 256, (2, 70))  # past the llama3 original 32
    ours, ref = np.asarray(model(ids)), torch_logits(tm, ids)
    assert ours.shape == (2, 70, 256)
    assert np.abs(ref).max() > 0.5, "oracle logits too small to make the test meaningful"
    assert np.abs(ours - ref).max() < 1e-4


def test_config_fields_read(tiny_checkpoints):
    cfg = models.from_pretrained(tiny_checkpoints["llama-gqa8x2-llama3rope"][0]).config
    assert (cfg.family, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim) == ("llama", 8, 2, 8)
    assert cfg.rope_llama3 == (8.0, 1.0, 4.0, 32)
    tied = models.from_pretrained(tiny_checkpoints["qwen3-mha-tied-theta1e6"][0])
    assert tied.config.tie_word_embeddings and not hasattr(tied, "lm_head")
    assert tied.config.qk_norm and tied.config.rope_theta == 1e6


def test_cached_chunks_equal_full_forward(tiny_checkpoints):
    """Prefill in two ragged chunks through the cache gives the full-forward logits."""
    model = models.from_pretrained(tiny_checkpoints["qwen3-gqa"][0])
    ids = np.random.default_rng(1).integers(0, 256, (2, 12))
    full = np.asarray(model(ids))
    cache = KVCache.zeros(model.config, 2, 32)
    first, cache = model.forward_cached(ids[:, :5], cache, np.zeros(2, np.int32))
    second, _ = model.forward_cached(ids[:, 5:], cache, np.full(2, 5, np.int32))
    np.testing.assert_allclose(np.concatenate([first, second], 1), full, atol=1e-5)


@pytest.mark.parametrize("name", ["qwen3-gqa", "llama-mqa-tied-bias", "llama-gqa8x2-llama3rope"])
def test_save_round_trip_loads_in_transformers(tiny_checkpoints, tmp_path, name):
    from transformers import AutoModelForCausalLM

    path, tm = tiny_checkpoints[name]
    model = models.from_pretrained(path)
    out = models.save_pretrained(model, tmp_path / "saved")
    reloaded = AutoModelForCausalLM.from_pretrained(str(out)).eval()
    ids = np.random.default_rng(2).integers(0, 256, (1, 20))
    np.testing.assert_allclose(torch_logits(reloaded, ids), torch_logits(tm, ids), atol=1e-5)
    np.testing.assert_allclose(np.asarray(models.from_pretrained(out)(ids)),
                               torch_logits(tm, ids), atol=1e-4)


def test_sharded_index_checkpoint(tiny_checkpoints, tmp_path):
    path, tm = tiny_checkpoints["qwen3-gqa"]
    out = models.save_pretrained(models.from_pretrained(path), tmp_path / "sh",
                                 max_shard_bytes=40_000)
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 2
    assert not (out / "model.safetensors").exists()
    ids = np.arange(16)[None]
    np.testing.assert_allclose(np.asarray(models.from_pretrained(out)(ids)),
                               torch_logits(tm, ids), atol=1e-4)


def test_bfloat16_params_and_compute(tiny_checkpoints):
    path, tm = tiny_checkpoints["qwen3-gqa"]
    model = models.from_pretrained(path, dtype="bfloat16")
    assert str(model.embed_tokens[...].dtype) == "bfloat16"
    ids = np.arange(24)[None]
    ours, ref = np.asarray(model(ids)), torch_logits(tm, ids)
    assert ours.dtype == np.float32
    assert np.abs(ours - ref).max() < 0.1 * np.abs(ref).max()
