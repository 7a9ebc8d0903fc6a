"""Tiny random checkpoints written by transformers: the oracle for our numerics."""

import pytest

from jaxtom.models.tiny import save_tiny_hf

# (family, overrides): head / kv-head / tied / rope settings the parity tests cover.
PARITY_CONFIGS = {
    "qwen3-gqa": ("qwen3", dict(num_attention_heads=4, num_key_value_heads=2)),
    "qwen3-mha-tied-theta1e6": ("qwen3", dict(num_attention_heads=4, num_key_value_heads=4,
                                              tie_word_embeddings=True, rope_theta=1e6)),
    "llama-gqa8x2-llama3rope": ("llama", dict(
        num_attention_heads=8, num_key_value_heads=2, head_dim=8,
        rope_scaling={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                      "high_freq_factor": 4.0, "original_max_position_embeddings": 32})),
    "llama-mqa-tied-bias": ("llama", dict(num_attention_heads=4, num_key_value_heads=1,
                                          tie_word_embeddings=True, attention_bias=True,
                                          rope_theta=500000.0)),
}


@pytest.fixture(scope="session")
def tiny_checkpoints(tmp_path_factory):
    """name -> (directory, torch model) for every parity config."""
    out = {}
    for name, (family, overrides) in PARITY_CONFIGS.items():
        path = tmp_path_factory.mktemp(name)
        out[name] = (path, save_tiny_hf(path, family, **overrides))
    return out
