"""Tiny random Qwen3-VL checkpoints written by transformers (tests, CPU smoke runs).

transformers is the numerical oracle, so the checkpoint must come from it. Imports torch
lazily; the library never needs it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

# token ids of the tiny vocabulary (the real ones are 151652..151656)
TINY_VL_TOKENS = dict(image_token_id=250, video_token_id=251, vision_start_token_id=252,
                      vision_end_token_id=253)
TINY_VL_TEXT: dict[str, Any] = dict(
    vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
    num_attention_heads=4, num_key_value_heads=2, head_dim=16, initializer_range=0.3,
    max_position_embeddings=4096,
    rope_parameters=dict(rope_type="default", rope_theta=10000.0, mrope_section=[2, 3, 3],
                         mrope_interleaved=True))
# 8x8 position table: images of other grids exercise the bilinear resampling
TINY_VL_VISION: dict[str, Any] = dict(
    depth=4, hidden_size=32, intermediate_size=64, num_heads=4, out_hidden_size=64,
    num_position_embeddings=64, deepstack_visual_indexes=[0, 1, 3], patch_size=16,
    initializer_range=0.3)


def tiny_vl_hf_config(text: dict | None = None, vision: dict | None = None, **overrides):
    from transformers import Qwen3VLConfig  # heavy: tests and parity only

    return Qwen3VLConfig(text_config={**TINY_VL_TEXT, **(text or {})},
                         vision_config={**TINY_VL_VISION, **(vision or {})},
                         **{**TINY_VL_TOKENS, **overrides})


def save_tiny_vl_hf(path: str | Path, *, seed: int = 0, text: dict | None = None,
                    vision: dict | None = None, **overrides):
    """Builds a random Qwen3VLForConditionalGeneration, saves it, returns it (eval mode).

    Biases and LayerNorm parameters, which transformers initialises to 0/1, are randomised
    so that loading them in the wrong place shows in the logits.
    """
    import torch  # test extra: parity oracles only
    from transformers import Qwen3VLForConditionalGeneration  # heavy: tests and parity only

    torch.manual_seed(seed)
    model = Qwen3VLForConditionalGeneration(tiny_vl_hf_config(text, vision, **overrides)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.startswith("model.visual.") and (name.endswith("bias") or ".norm" in name):
                p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(str(path))
    return model
