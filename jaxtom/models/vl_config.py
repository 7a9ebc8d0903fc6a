"""Qwen3-VL configuration: the Qwen3 text decoder's `ModelConfig` plus a vision tower.

The text side of Qwen3-VL is Qwen3 layer for layer; what differs is where its positions come
from (three axes, interleaved M-RoPE) and the visual features added to its first hidden
states. So the text part stays a plain `ModelConfig` (family "qwen3") and only the vision
tower and the multimodal token ids get a class of their own.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

from jaxtom import storage
from jaxtom.models.config import ModelConfig, config_from_hf_dict, config_to_hf_dict

VL_ARCHITECTURE = "Qwen3VLForConditionalGeneration"


@dataclasses.dataclass(frozen=True)
class VisionConfig:
    """Static shape of the Qwen3-VL vision tower (a ViT with 2x2 patch merging)."""

    depth: int
    hidden_size: int
    intermediate_size: int
    num_heads: int
    out_hidden_size: int  # the text model's hidden size
    num_position_embeddings: int  # a square learned table, side sqrt(n)
    deepstack_visual_indexes: tuple[int, ...] = (8, 16, 24)
    in_channels: int = 3
    patch_size: int = 16
    temporal_patch_size: int = 2
    spatial_merge_size: int = 2
    rope_theta: float = 10000.0
    layer_norm_eps: float = 1e-6
    initializer_range: float = 0.02  # std of a random tower's weights (checkpoints: unused)
    # the preprocessor's pixel-count range (Qwen3-VL's preprocessor_config.json `size`): a
    # picture is resized into it, so it fixes how many patches and tokens a picture costs;
    # part of the model's input contract, read by every `preprocess_image` call
    min_pixels: int = 256 * 256
    max_pixels: int = 4096 * 4096

    def __post_init__(self):
        for name in ("depth", "hidden_size", "intermediate_size", "num_heads", "out_hidden_size",
                     "num_position_embeddings", "in_channels", "patch_size",
                     "temporal_patch_size", "spatial_merge_size", "min_pixels", "max_pixels"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"VisionConfig.{name} must be a positive int, got {value!r}")
        if self.hidden_size % self.num_heads or (self.hidden_size // self.num_heads) % 4:
            raise ValueError(f"VisionConfig.hidden_size ({self.hidden_size}) must be num_heads "
                             f"({self.num_heads}) x a head_dim divisible by 4 (2-D rotary)")
        if self.min_pixels > self.max_pixels:
            raise ValueError(f"VisionConfig.min_pixels ({self.min_pixels}) exceeds max_pixels "
                             f"({self.max_pixels})")
        side = math.isqrt(self.num_position_embeddings)
        if side * side != self.num_position_embeddings:
            raise ValueError("VisionConfig.num_position_embeddings must be a square, got "
                             f"{self.num_position_embeddings}")
        bad = [i for i in self.deepstack_visual_indexes if not 0 <= i < self.depth]
        if bad:
            raise ValueError(f"VisionConfig.deepstack_visual_indexes {bad} lie outside the "
                             f"{self.depth} vision blocks")

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def patch_dim(self) -> int:
        """Length of one flattened patch: channels x temporal x patch x patch."""
        return self.in_channels * self.temporal_patch_size * self.patch_size ** 2

    @property
    def merge_unit(self) -> int:
        return self.spatial_merge_size ** 2

    @property
    def grid_side(self) -> int:
        return math.isqrt(self.num_position_embeddings)

    def num_params(self) -> int:
        """Parameter count of the tower (patch embedding, position table, blocks, mergers)."""
        d, f, out = self.hidden_size, self.intermediate_size, self.out_hidden_size
        d4 = d * self.merge_unit
        block = 4 * d + 3 * d * d + 3 * d + d * d + d + 2 * d * f + f + d
        merger = d4 * d4 + d4 + d4 * out + out
        return (self.patch_dim * d + d + self.num_position_embeddings * d + self.depth * block
                + merger + 2 * d + len(self.deepstack_visual_indexes) * (merger + 2 * d4))


@dataclasses.dataclass(frozen=True)
class VLConfig:
    """A Qwen3-VL model: text decoder + vision tower + multimodal token ids."""

    text: ModelConfig
    vision: VisionConfig
    image_token_id: int
    vision_start_token_id: int
    vision_end_token_id: int
    video_token_id: int | None = None
    mrope_section: tuple[int, int, int] = (24, 20, 20)

    def __post_init__(self):
        if self.text.family != "qwen3":
            raise ValueError(f"Qwen3-VL's text model must be family 'qwen3', got "
                             f"{self.text.family!r}")
        if self.vision.out_hidden_size != self.text.hidden_size:
            raise ValueError(f"vision out_hidden_size ({self.vision.out_hidden_size}) must equal "
                             f"the text hidden_size ({self.text.hidden_size})")
        if len(self.mrope_section) != 3 or sum(self.mrope_section) > self.text.head_dim // 2:
            raise ValueError(f"mrope_section {self.mrope_section} must be 3 sizes summing to at "
                             f"most head_dim/2 = {self.text.head_dim // 2}")
        if len(self.vision.deepstack_visual_indexes) > self.text.num_layers:
            raise ValueError("more deepstack levels than text layers")

    @property
    def kind(self) -> str:
        return "vision_language"

    @property
    def text_config(self) -> ModelConfig:
        return self.text

    @property
    def architecture(self) -> str:
        return VL_ARCHITECTURE

    def num_params(self) -> int:
        return self.text.num_params() + self.vision.num_params()

    def replace(self, **changes) -> "VLConfig":
        return dataclasses.replace(self, **changes)


def is_vl_dict(cfg: dict[str, Any]) -> bool:
    archs = cfg.get("architectures") or []
    return cfg.get("model_type") == "qwen3_vl" or VL_ARCHITECTURE in archs


def vl_config_from_hf_dict(cfg: dict[str, Any], *, dtype: str = "float32",
                           compute_dtype: str | None = None) -> VLConfig:
    """Builds a VLConfig from a Qwen3-VL `config.json` (text_config + vision_config)."""
    if not is_vl_dict(cfg):
        raise ValueError(f"not a Qwen3-VL config.json: model_type {cfg.get('model_type')!r}, "
                         f"architectures {cfg.get('architectures')}")
    for key in ("text_config", "vision_config", "image_token_id", "vision_start_token_id",
                "vision_end_token_id"):
        if key not in cfg:
            raise ValueError(f"Qwen3-VL config.json is missing {key!r}")
    text = dict(cfg["text_config"])
    rope = dict(text.get("rope_parameters") or text.get("rope_scaling") or {})
    section = tuple(int(s) for s in rope.pop("mrope_section", (24, 20, 20)))
    if rope.pop("mrope_interleaved", True) is not True:
        raise ValueError("only interleaved M-RoPE (mrope_interleaved: true) is supported")
    text["rope_parameters"] = rope
    text.pop("rope_scaling", None)
    text["architectures"] = ["Qwen3ForCausalLM"]
    tie = cfg.get("tie_word_embeddings", text.get("tie_word_embeddings", False))
    text["tie_word_embeddings"] = bool(tie)
    if "eos_token_id" not in text and "eos_token_id" in cfg:
        text["eos_token_id"] = cfg["eos_token_id"]
    text.setdefault("max_position_embeddings", 128000)
    text_cfg = config_from_hf_dict(text, dtype=dtype, compute_dtype=compute_dtype)
    v = cfg["vision_config"]
    if v.get("hidden_act", "gelu_pytorch_tanh") != "gelu_pytorch_tanh":
        raise ValueError(f"unsupported vision hidden_act {v['hidden_act']!r}")
    vrope = v.get("rope_parameters") or {}
    vision = VisionConfig(
        depth=int(v["depth"]), hidden_size=int(v["hidden_size"]),
        intermediate_size=int(v["intermediate_size"]), num_heads=int(v["num_heads"]),
        out_hidden_size=int(v["out_hidden_size"]),
        num_position_embeddings=int(v["num_position_embeddings"]),
        deepstack_visual_indexes=tuple(int(i) for i in v.get("deepstack_visual_indexes",
                                                             (8, 16, 24))),
        in_channels=int(v.get("in_channels", 3)), patch_size=int(v.get("patch_size", 16)),
        temporal_patch_size=int(v.get("temporal_patch_size", 2)),
        spatial_merge_size=int(v.get("spatial_merge_size", 2)),
        rope_theta=float(vrope.get("rope_theta", 10000.0)))
    return VLConfig(text=text_cfg, vision=vision, image_token_id=int(cfg["image_token_id"]),
                    vision_start_token_id=int(cfg["vision_start_token_id"]),
                    vision_end_token_id=int(cfg["vision_end_token_id"]),
                    video_token_id=cfg.get("video_token_id"), mrope_section=section)


def load_vl_config(path: str | Path, **kwargs) -> VLConfig:
    path = storage.path(path)
    file = path / "config.json" if path.is_dir() else path
    return vl_config_from_hf_dict(json.loads(file.read_text()), **kwargs)


def vl_config_to_hf_dict(cfg: VLConfig) -> dict[str, Any]:
    """The `config.json` transformers' Qwen3VLForConditionalGeneration reads back."""
    text = config_to_hf_dict(cfg.text)
    for key in ("architectures", "tie_word_embeddings", "rope_scaling", "torch_dtype", "dtype"):
        text.pop(key, None)
    text["model_type"] = "qwen3_vl_text"
    text["rope_parameters"] = {**text["rope_parameters"], "mrope_section": list(cfg.mrope_section),
                               "mrope_interleaved": True}
    v = cfg.vision
    vision = {"model_type": "qwen3_vl_vision", "depth": v.depth, "hidden_size": v.hidden_size,
              "intermediate_size": v.intermediate_size, "num_heads": v.num_heads,
              "out_hidden_size": v.out_hidden_size,
              "num_position_embeddings": v.num_position_embeddings,
              "deepstack_visual_indexes": list(v.deepstack_visual_indexes),
              "in_channels": v.in_channels, "patch_size": v.patch_size,
              "temporal_patch_size": v.temporal_patch_size,
              "spatial_merge_size": v.spatial_merge_size, "hidden_act": "gelu_pytorch_tanh",
              "rope_parameters": {"rope_type": "axial", "rope_theta": v.rope_theta}}
    return {"architectures": [VL_ARCHITECTURE], "model_type": "qwen3_vl",
            "text_config": text, "vision_config": vision,
            "image_token_id": cfg.image_token_id, "video_token_id": cfg.video_token_id,
            "vision_start_token_id": cfg.vision_start_token_id,
            "vision_end_token_id": cfg.vision_end_token_id,
            "tie_word_embeddings": cfg.text.tie_word_embeddings,
            "dtype": cfg.text.param_dtype}
