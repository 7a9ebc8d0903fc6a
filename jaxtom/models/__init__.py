"""Language models: one NNX decoder for Llama 3 / Qwen3, HF + GGUF loading, saving, LoRA.

`from_pretrained(path)` takes a Hugging Face directory or a `.gguf` file and returns a
`Decoder`, callable as `model(input_ids) -> logits [batch, seq, vocab]`.
"""

from __future__ import annotations

from pathlib import Path

from jax.sharding import Mesh

from jaxtom.models.config import ModelConfig, config_from_hf_dict, load_hf_config
from jaxtom.models.decoder import Decoder, KVCache, init_decoder
from jaxtom.models.gguf_io import from_pretrained_gguf, smollm2_gguf_path
from jaxtom.models.hf_io import from_pretrained_hf, save_pretrained
from jaxtom.models.lora import add_lora, merge_lora


def from_pretrained(path: str | Path, *, dtype: str = "float32",
                    compute_dtype: str | None = None, mesh: Mesh | None = None) -> Decoder:
    """Loads an HF safetensors directory or a GGUF file, sharded over `mesh` if given."""
    path = Path(path)
    if path.suffix == ".gguf":
        return from_pretrained_gguf(path, dtype=dtype, compute_dtype=compute_dtype, mesh=mesh)
    if not path.is_dir():
        raise FileNotFoundError(f"{path} is neither a Hugging Face model directory nor a "
                                ".gguf file")
    return from_pretrained_hf(path, dtype=dtype, compute_dtype=compute_dtype, mesh=mesh)


__all__ = ["Decoder", "KVCache", "ModelConfig", "add_lora", "config_from_hf_dict",
           "from_pretrained", "init_decoder", "load_hf_config", "merge_lora",
           "save_pretrained", "smollm2_gguf_path"]
