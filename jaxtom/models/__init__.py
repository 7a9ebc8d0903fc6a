"""Language models: one NNX decoder for Llama 3 / Qwen3, HF + GGUF loading, saving, LoRA;
Qwen3-VL (vision tower + that decoder) for image prompts.

`from_pretrained(path)` takes a Hugging Face directory or a `.gguf` file and returns a
`Decoder`, callable as `model(input_ids) -> logits [batch, seq, vocab]`, or a `Qwen3VL` for a
Qwen3-VL directory (see `jaxtom.models.qwen3_vl`).
"""

from __future__ import annotations

import json
from pathlib import Path

from jax.sharding import Mesh

from jaxtom import storage
from jaxtom.errors import BadInputError, MissingInputError
from jaxtom.models.config import ModelConfig, config_from_hf_dict, load_hf_config
from jaxtom.models.decoder import Decoder, KVCache, init_decoder
from jaxtom.models.gguf_io import from_pretrained_gguf, open_gguf, smollm2_gguf_path
from jaxtom.models.hf_io import from_pretrained_hf, open_hf_dir
from jaxtom.models.hf_io import save_pretrained as _save_pretrained_text
from jaxtom.models.lora import add_lora, merge_lora
from jaxtom.models.qwen3_vl import Qwen3VL, init_qwen3_vl
from jaxtom.models.vl_config import VLConfig, is_vl_dict, load_vl_config
from jaxtom.models.vl_io import from_pretrained_vl, save_pretrained_vl


def from_pretrained(path: str | Path, *, dtype: str = "float32",
                    compute_dtype: str | None = None, mesh: Mesh | None = None
                    ) -> Decoder | Qwen3VL:
    """Loads an HF safetensors directory or a GGUF file, sharded over `mesh` if given; a
    Qwen3-VL directory gives a `Qwen3VL`. A directory may be remote (`gs://...`)."""
    path = storage.path(path)
    if _kind(path) == "gguf":
        return from_pretrained_gguf(path, dtype=dtype, compute_dtype=compute_dtype, mesh=mesh)
    if is_vl_dir(path):
        return from_pretrained_vl(path, dtype=dtype, compute_dtype=compute_dtype, mesh=mesh)
    return from_pretrained_hf(path, dtype=dtype, compute_dtype=compute_dtype, mesh=mesh)


def _kind(path) -> str:
    """"gguf" (a local .gguf file) or "dir" (a directory, local or remote); else one error
    saying what the path is and what was expected."""
    if path.suffix == ".gguf" and storage.is_uri(path):
        raise BadInputError(f"{path}: a .gguf checkpoint must be a local file (it is "
                            f"memory-mapped); copy it to local disk, or give a Hugging Face "
                            f"directory, which may be remote")
    if path.suffix == ".gguf":
        return "gguf"
    if not path.is_dir():
        found = "it is a file" if path.exists() else "it does not exist"
        raise MissingInputError(f"{path} is neither a Hugging Face model directory nor a "
                                f".gguf file ({found})")
    return "dir"


def check_checkpoint(path: str | Path) -> None:
    """Reads what loading `path` reads first, without building anything: a GGUF file's
    header, or a directory's config.json and every safetensors header (each tensor's bytes
    checked against its file's size). A missing, truncated or garbled checkpoint then fails
    in seconds with one error naming the file, before a run prepares its data."""
    path = storage.path(path)
    if _kind(path) == "gguf":
        open_gguf(path)
        return
    if is_vl_dir(path):
        load_vl_config(path)
    else:
        load_hf_config(path)
    open_hf_dir(path)


def is_vl_dir(path: str | Path) -> bool:
    """Whether `path` is a Hugging Face directory of a Qwen3-VL checkpoint."""
    file = storage.path(path) / "config.json"
    if not file.is_file():
        return False
    try:
        return is_vl_dict(json.loads(file.read_text()))
    except ValueError as err:  # JSONDecodeError, UnicodeDecodeError
        raise BadInputError(f"{file}: not a JSON config ({err}); expected a Hugging Face "
                            "config.json (truncated download?)") from None


def save_pretrained(model: Decoder | Qwen3VL, path: str | Path, **kwargs) -> Path:
    """Writes an HF directory (config.json + safetensors) transformers loads back."""
    if isinstance(model, Qwen3VL):
        return save_pretrained_vl(model, path)
    return _save_pretrained_text(model, path, **kwargs)


__all__ = ["Decoder", "KVCache", "ModelConfig", "Qwen3VL", "VLConfig", "add_lora",
           "check_checkpoint", "config_from_hf_dict", "from_pretrained", "init_decoder",
           "init_qwen3_vl", "is_vl_dir", "load_hf_config", "merge_lora", "save_pretrained",
           "smollm2_gguf_path"]
