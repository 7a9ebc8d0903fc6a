"""Decoder configuration read from a Hugging Face `config.json`.

One frozen dataclass covers the Llama 3 family and Qwen3: the two differ only in q/k RMSNorm
and RoPE defaults, so a second class would only duplicate validation.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from jaxtom import storage
from jaxtom.errors import BadInputError, MissingInputError

# HF architecture name -> our family name.
SUPPORTED_ARCHITECTURES = {
    "LlamaForCausalLM": "llama",
    "Qwen3ForCausalLM": "qwen3",
}
_MODEL_TYPES = {"llama": "LlamaForCausalLM", "qwen3": "Qwen3ForCausalLM"}
_DTYPES = ("float32", "bfloat16", "float16")
# What the training forward keeps for the backward pass (see ModelConfig.remat).
REMAT_MODES = ("auto", "layer", "none")
# How the training forward attends (see ModelConfig.attention).
ATTENTION_MODES = ("auto", "dense", "blockwise")


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Static shape and numerics of a decoder; hashable so it can be a jit static argument."""

    family: str  # "llama" or "qwen3"
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float = 1e-6
    rope_theta: float = 10000.0
    # llama3 frequency scaling: (factor, low_freq_factor, high_freq_factor, original_max_pos)
    rope_llama3: tuple[float, float, float, int] | None = None
    max_position_embeddings: int = 4096
    tie_word_embeddings: bool = False
    attention_bias: bool = False
    qk_norm: bool = False
    bos_token_id: int | None = None
    eos_token_ids: tuple[int, ...] = ()
    param_dtype: str = "float32"
    compute_dtype: str = "float32"
    # std of a random initialisation's normal weights (HF's name; a loaded checkpoint ignores
    # it). 0.02 is sized for widths in the hundreds to thousands; a from-scratch CPU model of
    # width ~100 learns attention far sooner near 1/sqrt(hidden_size) (`jaxtom.ctom.tiny`).
    initializer_range: float = 0.02
    # Rematerialisation in the training forward (`Decoder.__call__`): "layer" keeps only each
    # layer's input hidden state for the backward pass and recomputes the rest of the layer
    # (attention matrices, MLP activations) there, one layer at a time, for ~1 extra forward
    # of FLOPs; "none" keeps every activation; "auto" (default) rematerialises scanned layer
    # stacks (deep models, where the kept activations are what does not fit) and not the
    # unrolled small models, whose steps are latency-bound and only get slower. Numerics
    # are the same in every mode. Not part of config.json.
    remat: str = "auto"
    # The training forward's attention: "dense" forms each row's [T, T] mask and fp32 scores
    # (query blocks skip the keys after them); "blockwise" is online-softmax attention over
    # `attention_block`-token blocks with memory linear in T (`jaxtom.models.blockwise`);
    # "auto" (default) is dense up to `attention_block` * 8 tokens and blockwise beyond, where
    # the dense scores dominate memory and blockwise is the faster of the two. The two agree
    # to float rounding. Not part of config.json.
    attention: str = "auto"
    attention_block: int = 512

    def __post_init__(self):
        for name in ("vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads",
                     "num_kv_heads", "head_dim"):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise ValueError(f"ModelConfig.{name} must be a positive int, got {value!r}")
        if self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_heads ({self.num_heads}) must be a multiple of num_kv_heads "
                f"({self.num_kv_heads}) for grouped-query attention")
        for name in ("param_dtype", "compute_dtype"):
            if getattr(self, name) not in _DTYPES:
                raise ValueError(f"ModelConfig.{name} must be one of {_DTYPES}, "
                                 f"got {getattr(self, name)!r}")
        if self.attention not in ATTENTION_MODES:
            raise ValueError(f"ModelConfig.attention must be one of {ATTENTION_MODES}, "
                             f"got {self.attention!r}")
        if not isinstance(self.attention_block, int) or self.attention_block <= 0:
            raise ValueError(f"ModelConfig.attention_block must be a positive int, "
                             f"got {self.attention_block!r}")
        if self.remat not in REMAT_MODES:
            raise ValueError(f"ModelConfig.remat must be one of {REMAT_MODES}, "
                             f"got {self.remat!r}")

    def blockwise_attention(self, length: int) -> bool:
        """Whether the training forward of `length`-token rows attends blockwise."""
        if self.attention == "auto":
            return length > 8 * self.attention_block
        return self.attention == "blockwise"

    @property
    def architecture(self) -> str:
        return _MODEL_TYPES[self.family]

    @property
    def kind(self) -> str:
        """What the model reads: "text" (this decoder) or "vision_language" (`VLConfig`)."""
        return "text"

    @property
    def text_config(self) -> ModelConfig:
        """The text decoder's config (itself; a `VLConfig`'s is its language model's)."""
        return self

    def num_params(self, include_embeddings: bool = True) -> int:
        """Parameter count; the FLOPs helper uses it without building the model."""
        d, f, hd = self.hidden_size, self.intermediate_size, self.head_dim
        q, kv = self.num_heads * hd, self.num_kv_heads * hd
        attn = d * q + 2 * d * kv + q * d
        if self.attention_bias:
            attn += q + 2 * kv + d
        per_layer = attn + 3 * d * f + 2 * d + (2 * hd if self.qk_norm else 0)
        total = self.num_layers * per_layer + d
        if include_embeddings:
            total += self.vocab_size * d * (1 if self.tie_word_embeddings else 2)
        return total

    def replace(self, **changes) -> "ModelConfig":
        return dataclasses.replace(self, **changes)


def _rope_from_hf(cfg: dict[str, Any]) -> tuple[float, tuple | None]:
    """Reads RoPE settings in both the transformers 5 (`rope_parameters`) and 4.x forms."""
    params = cfg.get("rope_parameters") or cfg.get("rope_scaling") or {}
    theta = float(params.get("rope_theta", cfg.get("rope_theta", 10000.0)))
    rope_type = params.get("rope_type", params.get("type", "default")) or "default"
    if rope_type == "default":
        return theta, None
    if rope_type == "llama3":
        try:
            return theta, (float(params["factor"]), float(params["low_freq_factor"]),
                           float(params["high_freq_factor"]),
                           int(params["original_max_position_embeddings"]))
        except KeyError as err:
            raise ValueError(f"llama3 rope scaling in config.json lacks {err.args[0]!r}") from None
    raise ValueError(f"unsupported rope_type {rope_type!r} in config.json; "
                     "supported: 'default', 'llama3'")


def config_from_hf_dict(cfg: dict[str, Any], *, dtype: str = "float32",
                        compute_dtype: str | None = None) -> ModelConfig:
    """Builds a ModelConfig from the parsed contents of a Hugging Face `config.json`."""
    archs = cfg.get("architectures") or [_MODEL_TYPES.get(cfg.get("model_type"), "")]
    arch = archs[0]
    if arch not in SUPPORTED_ARCHITECTURES:
        raise ValueError(f"unsupported architecture {arch!r} in config.json; "
                         f"supported: {sorted(SUPPORTED_ARCHITECTURES)}")
    family = SUPPORTED_ARCHITECTURES[arch]
    if cfg.get("hidden_act", "silu") != "silu":
        raise ValueError(f"unsupported hidden_act {cfg['hidden_act']!r}; expected 'silu'")
    if family == "qwen3" and cfg.get("use_sliding_window"):
        raise ValueError("Qwen3 sliding-window attention is not supported (use_sliding_window)")
    missing = [k for k in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                           "num_attention_heads") if k not in cfg]
    if missing:
        raise ValueError(f"config.json is missing required fields {missing}")
    theta, llama3 = _rope_from_hf(cfg)
    heads = int(cfg["num_attention_heads"])
    eos = cfg.get("eos_token_id")
    eos = () if eos is None else tuple(eos) if isinstance(eos, list) else (int(eos),)
    return ModelConfig(
        family=family,
        vocab_size=int(cfg["vocab_size"]),
        hidden_size=int(cfg["hidden_size"]),
        intermediate_size=int(cfg["intermediate_size"]),
        num_layers=int(cfg["num_hidden_layers"]),
        num_heads=heads,
        num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
        head_dim=int(cfg.get("head_dim") or cfg["hidden_size"] // heads),
        rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
        rope_theta=theta,
        rope_llama3=llama3,
        max_position_embeddings=int(cfg.get("max_position_embeddings", 4096)),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        attention_bias=bool(cfg.get("attention_bias", False)),
        qk_norm=family == "qwen3",
        bos_token_id=cfg.get("bos_token_id"),
        eos_token_ids=eos,
        param_dtype=dtype,
        compute_dtype=compute_dtype or dtype,
    )


def load_hf_config(path: str | Path, **kwargs) -> ModelConfig:
    """Reads `<path>/config.json` (or the file itself; local or `gs://...`) into a
    ModelConfig."""
    path = storage.path(path)
    file = path / "config.json" if path.is_dir() else path
    if not file.exists():
        raise MissingInputError(f"{file}: no such file (expected the model's config.json)")
    try:
        data = json.loads(file.read_text())
    except ValueError as err:  # JSONDecodeError, UnicodeDecodeError
        raise BadInputError(f"{file}: not a JSON config ({err}); expected a Hugging Face "
                            "config.json (truncated download?)") from None
    if not isinstance(data, dict):
        raise BadInputError(f"{file}: holds a JSON {type(data).__name__}; expected a Hugging "
                            "Face config.json object")
    try:
        return config_from_hf_dict(data, **kwargs)
    except ValueError as err:  # an architecture or setting this library does not support
        raise BadInputError(f"{file}: {err}") from err


def config_to_hf_dict(cfg: ModelConfig) -> dict[str, Any]:
    """The `config.json` transformers needs to rebuild the same network."""
    if cfg.qk_norm != (cfg.family == "qwen3"):
        raise ValueError(f"a {cfg.family} decoder with qk_norm={cfg.qk_norm} has no transformers "
                         f"architecture (Qwen3 always has q/k norm, Llama never); expected "
                         f"qk_norm={cfg.family == 'qwen3'} to export it")
    rope: dict[str, Any] = {"rope_theta": cfg.rope_theta, "rope_type": "default"}
    if cfg.rope_llama3 is not None:
        factor, low, high, orig = cfg.rope_llama3
        rope.update(rope_type="llama3", factor=factor, low_freq_factor=low,
                    high_freq_factor=high, original_max_position_embeddings=orig)
    eos = list(cfg.eos_token_ids)
    out = {
        "architectures": [cfg.architecture],
        "model_type": cfg.family,
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": cfg.num_layers,
        "num_attention_heads": cfg.num_heads,
        "num_key_value_heads": cfg.num_kv_heads,
        "head_dim": cfg.head_dim,
        "hidden_act": "silu",
        "rms_norm_eps": cfg.rms_norm_eps,
        "rope_theta": cfg.rope_theta,
        "rope_parameters": rope,
        "max_position_embeddings": cfg.max_position_embeddings,
        "tie_word_embeddings": cfg.tie_word_embeddings,
        "attention_bias": cfg.attention_bias,
        "bos_token_id": cfg.bos_token_id,
        "eos_token_id": eos[0] if len(eos) == 1 else (eos or None),
        "torch_dtype": cfg.param_dtype,
        "dtype": cfg.param_dtype,
    }
    if cfg.rope_llama3 is not None:
        out["rope_scaling"] = dict(rope)
    return out
