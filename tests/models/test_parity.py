"""Logit parity with transformers (PyTorch CPU) and the save -> transformers round trip."""

import json

import numpy as np
import pytest
import torch

from jaxtom import models
from jaxtom.models.decoder import KVCache

from tests.tolerance import assert_close, decoder_depth, decoder_reduction, is_close

from .conftest import PARITY_CONFIGS


def torch_logits(tm, ids):
    with torch.no_grad():
        return tm(torch.tensor(np.asarray(ids))).logits.numpy()


def forward_tol(cfg, seq_len):
    """Float32 rounding of a decoder forward to the logits (tests/tolerance.py): both sides
    round, in different orders (jaxtom/XLA vs PyTorch), the bound covers any order."""
    return dict(reduction=decoder_reduction(cfg, seq_len), depth=decoder_depth(cfg))


@pytest.mark.parametrize("name", sorted(PARITY_CONFIGS))
def test_logits_match_transformers(tiny_checkpoints, name):
    path, tm = tiny_checkpoints[name]
    model = models.from_pretrained(path)
    ids = np.random.default_rng(0).integers(0, 256, (2, 70))  # past the llama3 original 32
    ours, ref = np.asarray(model(ids)), torch_logits(tm, ids)
    assert ours.shape == (2, 70, 256)
    assert np.abs(ref).max() > 0.5, "oracle logits too small to make the test meaningful"
    assert_close(ours, ref, **forward_tol(model.config, 70))
    # an off-by-one position from the middle on (RoPE sees relative offsets) fails it
    shifted = np.arange(70)[None].repeat(2, 0)
    shifted[:, 35:] += 1
    assert not is_close(model(ids, shifted), ref, **forward_tol(model.config, 70))


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
    # float32 rounding in another order (attention over the 32-slot cache), both jaxtom
    tol = forward_tol(model.config, 32)
    assert_close(np.concatenate([first, second], 1), full, **tol)
    # resuming one slot early (overwriting the last prefilled key) fails it
    early, _ = model.forward_cached(ids[:, 5:], cache, np.full(2, 4, np.int32))
    assert not is_close(np.concatenate([first, early], 1), full, **tol)
    # only the wanted entry's logits (a prefill's last token), each row its own, and the
    # same cache
    picks = np.asarray([6, 2], np.int32)
    picked, cache_picked = model.forward_cached(ids[:, 5:], cache, np.full(2, 5, np.int32),
                                                last=picks)
    assert picked.shape == (2, 1, model.config.vocab_size)
    assert_close(picked[:, 0], np.asarray(second)[np.arange(2), picks], **tol)
    _, cache_all = model.forward_cached(ids[:, 5:], cache, np.full(2, 5, np.int32))
    np.testing.assert_array_equal(np.asarray(cache_picked.k), np.asarray(cache_all.k))


@pytest.mark.parametrize("name", ["qwen3-gqa", "llama-mqa-tied-bias", "llama-gqa8x2-llama3rope"])
def test_save_round_trip_loads_in_transformers(tiny_checkpoints, tmp_path, name):
    from transformers import AutoModelForCausalLM

    path, tm = tiny_checkpoints[name]
    model = models.from_pretrained(path)
    out = models.save_pretrained(model, tmp_path / "saved")
    reloaded = AutoModelForCausalLM.from_pretrained(str(out)).eval()
    ids = np.random.default_rng(2).integers(0, 256, (1, 20))
    # the same float32 weights in the same PyTorch program: equal bit for bit
    np.testing.assert_array_equal(torch_logits(reloaded, ids), torch_logits(tm, ids))
    ours = models.from_pretrained(out)
    assert_close(ours(ids), torch_logits(tm, ids), **forward_tol(ours.config, 20))


def test_sharded_index_checkpoint(tiny_checkpoints, tmp_path):
    path, tm = tiny_checkpoints["qwen3-gqa"]
    out = models.save_pretrained(models.from_pretrained(path), tmp_path / "sh",
                                 max_shard_bytes=40_000)
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert len(set(index["weight_map"].values())) > 2
    assert not (out / "model.safetensors").exists()
    ids = np.arange(16)[None]
    ours = models.from_pretrained(out)
    assert_close(ours(ids), torch_logits(tm, ids), **forward_tol(ours.config, 16))


def test_bfloat16_params_and_compute(tiny_checkpoints):
    path, tm = tiny_checkpoints["qwen3-gqa"]
    model = models.from_pretrained(path, dtype="bfloat16")
    assert str(model.embed_tokens[...].dtype) == "bfloat16"
    ids = np.arange(24)[None]
    ours, ref = np.asarray(model(ids)), torch_logits(tm, ids)
    assert ours.dtype == np.float32
    assert np.abs(ours - ref).max() < 0.1 * np.abs(ref).max()
