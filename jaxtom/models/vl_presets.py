"""The released Qwen3-VL-4B/8B-Instruct architectures (their `config.json`), for planning and
paper-scale configs without the weights at hand.

The dicts are the checkpoints' own config.json contents (transformers 4.57 format, as
published), so `vl_config_from_hf_dict` reads them exactly as it reads a downloaded directory.
"""

from __future__ import annotations

import copy
from typing import Any

from jaxtom.models.vl_config import VLConfig, vl_config_from_hf_dict

_TOKENS = dict(image_token_id=151655, video_token_id=151656, vision_start_token_id=151652,
               vision_end_token_id=151653)


def _text(hidden: int, intermediate: int, tie: bool) -> dict[str, Any]:
    return {"model_type": "qwen3_vl_text", "vocab_size": 151936, "hidden_size": hidden,
            "intermediate_size": intermediate, "num_hidden_layers": 36,
            "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 128,
            "hidden_act": "silu", "max_position_embeddings": 262144, "rms_norm_eps": 1e-6,
            "rope_scaling": {"mrope_interleaved": True, "mrope_section": [24, 20, 20],
                             "rope_type": "default"},
            "rope_theta": 5000000, "attention_bias": False, "tie_word_embeddings": tie,
            "bos_token_id": 151643, "eos_token_id": 151645}


def _vision(depth: int, hidden: int, intermediate: int, out: int, deepstack: list[int]):
    return {"model_type": "qwen3_vl", "depth": depth, "hidden_size": hidden,
            "intermediate_size": intermediate, "num_heads": 16, "out_hidden_size": out,
            "num_position_embeddings": 2304, "deepstack_visual_indexes": deepstack,
            "hidden_act": "gelu_pytorch_tanh", "in_channels": 3, "patch_size": 16,
            "spatial_merge_size": 2, "temporal_patch_size": 2}


PRESETS: dict[str, dict[str, Any]] = {
    "Qwen3-VL-4B-Instruct": {
        "architectures": ["Qwen3VLForConditionalGeneration"], "model_type": "qwen3_vl",
        "text_config": _text(2560, 9728, True),
        "vision_config": _vision(24, 1024, 4096, 2560, [5, 11, 17]),
        "tie_word_embeddings": True, **_TOKENS},
    "Qwen3-VL-8B-Instruct": {
        "architectures": ["Qwen3VLForConditionalGeneration"], "model_type": "qwen3_vl",
        "text_config": _text(4096, 12288, False),
        "vision_config": _vision(27, 1152, 4304, 4096, [8, 16, 24]),
        "tie_word_embeddings": False, **_TOKENS},
}


def preset_dict(name: str) -> dict[str, Any]:
    if name not in PRESETS:
        raise ValueError(f"unknown Qwen3-VL preset {name!r}; known: {sorted(PRESETS)}")
    return copy.deepcopy(PRESETS[name])


def preset_config(name: str, **kwargs) -> VLConfig:
    """The VLConfig of a released model (kwargs: dtype, compute_dtype)."""
    return vl_config_from_hf_dict(preset_dict(name), **kwargs)
