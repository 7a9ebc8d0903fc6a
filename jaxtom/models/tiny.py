"""Tiny random Hugging Face checkpoints built with transformers (tests and benchmarks).

transformers + torch are the oracle for our numerics, so the checkpoints under test must be
written by transformers itself. Imports torch lazily; the library never needs it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

TINY_DEFAULTS: dict[str, Any] = dict(
    vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
    num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=512,
    initializer_range=0.3, rms_norm_eps=1e-6,
)


def tiny_hf_config(family: str, **overrides):
    """A transformers config for a small Qwen3 or Llama model; overrides win."""
    from transformers import LlamaConfig, Qwen3Config  # heavy: tests and parity only

    classes = {"qwen3": Qwen3Config, "llama": LlamaConfig}
    if family not in classes:
        raise ValueError(f"family must be one of {sorted(classes)}, got {family!r}")
    kwargs = {**TINY_DEFAULTS, "bos_token_id": None, "eos_token_id": None, **overrides}
    return classes[family](**kwargs)


def save_tiny_hf(path: str | Path, family: str = "qwen3", *, seed: int = 0, **overrides):
    """Builds a random transformers model, saves it with `save_pretrained`, returns it."""
    import torch  # test extra: parity oracles only
    from transformers import LlamaForCausalLM, Qwen3ForCausalLM  # heavy: tests and parity only

    config = tiny_hf_config(family, **overrides)
    torch.manual_seed(seed)
    cls = {"qwen3": Qwen3ForCausalLM, "llama": LlamaForCausalLM}[family]
    model = cls(config).eval()
    if config.attention_bias:  # HF initialises biases to zero; make them matter
        with torch.no_grad():
            for name, p in model.named_parameters():
                if name.endswith("bias"):
                    p.normal_(0.0, 0.1)
    model.save_pretrained(str(path))
    return model
