"""Qwen3-VL Hugging Face checkpoints (config.json + safetensors) <-> `Qwen3VL`.

The text decoder's tensors are the Qwen3 ones under `model.language_model.`; they are read
with `hf_io`'s own reader through a renaming view, so text loading has one implementation.
Vision tensors map by a small table; the Conv3d patch kernel becomes a linear map on
flattened patches.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
from flax import nnx
from jax.sharding import Mesh

from jaxtom import storage
from jaxtom.models import hf_io
from jaxtom.models.lora import merge_lora
from jaxtom.models.qwen3_vl import Qwen3VL
from jaxtom.models.vl_config import VLConfig, load_vl_config, vl_config_to_hf_dict

TEXT_PREFIX = "model.language_model."
VISION_PREFIX = "model.visual."
_BLOCK_NAMES = {"norm1_weight": "norm1.weight", "norm1_bias": "norm1.bias",
                "norm2_weight": "norm2.weight", "norm2_bias": "norm2.bias",
                "qkv": "attn.qkv.weight", "qkv_bias": "attn.qkv.bias",
                "proj": "attn.proj.weight", "proj_bias": "attn.proj.bias",
                "fc1": "mlp.linear_fc1.weight", "fc1_bias": "mlp.linear_fc1.bias",
                "fc2": "mlp.linear_fc2.weight", "fc2_bias": "mlp.linear_fc2.bias"}
_MERGER_NAMES = {"norm_weight": "norm.weight", "norm_bias": "norm.bias",
                 "fc1": "linear_fc1.weight", "fc1_bias": "linear_fc1.bias",
                 "fc2": "linear_fc2.weight", "fc2_bias": "linear_fc2.bias"}
_VISION_TRANSPOSED = ("qkv", "proj", "fc1", "fc2")


class TextView:
    """The text decoder's tensors of a VL checkpoint under the plain Qwen3 names."""

    def __init__(self, source):
        self.source = source

    @staticmethod
    def outer(name: str) -> str:
        return name if name == "lm_head.weight" else TEXT_PREFIX + name.removeprefix("model.")

    @property
    def names(self) -> set[str]:
        out = {"model." + n[len(TEXT_PREFIX):] for n in self.source.names
               if n.startswith(TEXT_PREFIX)}
        return out | ({"lm_head.weight"} & self.source.names)

    def shape(self, name):
        return self.source.shape(self.outer(name))

    def read(self, name):
        return self.source.read(self.outer(name))

    def read_boxes(self, requests):
        return self.source.read_boxes([(self.outer(n), box) for n, box in requests])


def vision_tensor_names(param: str, depth: int, n_deep: int) -> list[str]:
    """Our vision parameter path (e.g. 'blocks.qkv') -> its HF tensor names (one per stacked
    layer for stacked parameters)."""
    if param == "patch_embed":
        return [VISION_PREFIX + "patch_embed.proj.weight"]
    if param == "patch_embed_bias":
        return [VISION_PREFIX + "patch_embed.proj.bias"]
    if param == "pos_embed":
        return [VISION_PREFIX + "pos_embed.weight"]
    group, name = param.split(".")
    if group == "blocks":
        return [f"{VISION_PREFIX}blocks.{i}.{_BLOCK_NAMES[name]}" for i in range(depth)]
    if group == "merger":
        return [f"{VISION_PREFIX}merger.{_MERGER_NAMES[name]}"]
    if group == "deepstack":
        return [f"{VISION_PREFIX}deepstack_merger_list.{i}.{_MERGER_NAMES[name]}"
                for i in range(n_deep)]
    raise KeyError(f"unknown vision parameter {param!r}")


def to_ours(param: str, arr: np.ndarray) -> np.ndarray:
    """One HF tensor -> our layout (per stacked layer)."""
    if param == "patch_embed":
        return arr.reshape(arr.shape[0], -1).T
    if param.split(".")[-1] in _VISION_TRANSPOSED:
        return arr.T
    return arr


def to_hf(param: str, arr: np.ndarray, cfg: VLConfig) -> np.ndarray:
    v = cfg.vision
    if param == "patch_embed":
        return arr.T.reshape(v.hidden_size, v.in_channels, v.temporal_patch_size,
                             v.patch_size, v.patch_size)
    if param.split(".")[-1] in _VISION_TRANSPOSED:
        return arr.T
    return arr


def _vision_params(state):
    for path, var in nnx.to_flat_state(state):
        if path[0] == "visual":
            yield ".".join(map(str, path[1:])), var


def check_vision_tensors(cfg: VLConfig, state, source) -> None:
    v = cfg.vision
    problems, expected = [], set()
    for param, var in _vision_params(state):
        names = vision_tensor_names(param, v.depth, len(v.deepstack_visual_indexes))
        shape = tuple(var.get_value().shape)
        per = shape[1:] if len(names) > 1 or param.split(".")[0] in ("blocks", "deepstack") \
            else shape
        for name in names:
            expected.add(name)
            if name not in source.names:
                problems.append(f"missing {name}")
            elif to_ours(param, np.empty(source.shape(name), np.int8)).shape != per:
                problems.append(f"tensor {name!r} has shape {source.shape(name)}, which does "
                                f"not fit {per}")
    unexpected = sorted(n for n in source.names if n.startswith(VISION_PREFIX)
                        and n not in expected)
    if unexpected:
        problems.append(f"unexpected tensors {unexpected[:8]}")
    if problems:
        raise ValueError("Qwen3-VL checkpoint does not match config.json: "
                         + "; ".join(problems[:12]))


def load_vl_state(cfg: VLConfig, source, mesh: Mesh | None = None) -> Qwen3VL:
    """Builds a Qwen3VL whose parameters are read into their (sharded) places."""
    abstract = nnx.eval_shape(lambda: Qwen3VL(cfg, rngs=nnx.Rngs(0)))
    graphdef, state = nnx.split(abstract)
    text = TextView(source)
    hf_io.check_tensors(cfg.text, nnx.state(abstract.language_model), text)
    check_vision_tensors(cfg, state, source)
    dtype = np.dtype(cfg.text.param_dtype) if cfg.text.param_dtype != "bfloat16" \
        else ml_dtypes.bfloat16
    v = cfg.vision

    def vision_reader(param):
        """Reads only the block of the process's shards, by byte range."""
        names = vision_tensor_names(param, v.depth, len(v.deepstack_visual_indexes))
        stacked = param.split(".")[0] in ("blocks", "deepstack")

        def read(index):
            layers = range(index[0].start, index[0].stop) if stacked else [0]
            ours = index[1:] if stacked else index
            if param == "patch_embed":
                # ours [patch, hidden] is the Conv3d kernel [hidden, ...] flattened and
                # transposed: its rows for the hidden range, whole, then the patch range
                rows = ((ours[1].start, ours[1].stop),) + tuple(
                    (0, n) for n in source.shape(names[0])[1:])
                requests = [(names[i], rows) for i in layers]
                cut = ours[0], slice(None)
            else:
                transposed = param.split(".")[-1] in _VISION_TRANSPOSED
                box = tuple((s.start, s.stop) for s in (ours[::-1] if transposed else ours))
                requests = [(names[i], box) for i in layers]
                cut = (slice(None),) * len(ours)
            blocks = [np.asarray(to_ours(param, b)[cut], np.float32).astype(dtype)
                      for b in source.read_boxes(requests)]
            return np.stack(blocks) if stacked else blocks[0]
        return read

    def reader(path):
        param = ".".join(map(str, path[1:]))
        if path[0] == "language_model":
            return hf_io._reader(param, text, dtype, param.startswith("layers."))
        return vision_reader(param)

    return hf_io.read_into_place(graphdef, state, mesh, reader)


def from_pretrained_vl(path, *, dtype: str = "float32",
                       compute_dtype: str | None = None, mesh: Mesh | None = None) -> Qwen3VL:
    path = storage.path(path)
    cfg = load_vl_config(path, dtype=dtype, compute_dtype=compute_dtype)
    if mesh is not None:
        hf_io.check_mesh_fits(cfg.text, mesh)
    return load_vl_state(cfg, hf_io.open_hf_dir(path), mesh)


def save_pretrained_vl(model: Qwen3VL, path):
    """Writes config.json + model.safetensors that transformers loads as
    Qwen3VLForConditionalGeneration (one file; LoRA on the text decoder is merged). Process
    0 writes, one tensor gathered at a time (as `hf_io.save_pretrained`)."""

    cfg = model.config
    path = storage.path(path)
    entries = hf_io.decoder_entries(merge_lora(model.language_model), TextView.outer)
    v = cfg.vision
    for param, var in _vision_params(nnx.state(model, nnx.Param)):
        x = var.get_value()
        names = vision_tensor_names(param, v.depth, len(v.deepstack_visual_indexes))
        stacked = param.split(".")[0] in ("blocks", "deepstack")
        per = tuple(x.shape[1:] if stacked else x.shape)
        hf_shape = to_hf(param, np.empty(per, np.int8), cfg).shape
        for i, name in enumerate(names):
            def fetch(x=x, layer=i if stacked else None, param=param):
                block = hf_io.host_block(x, layer)
                return None if block is None else to_hf(param, block, cfg)
            entries.append(hf_io.Entry(name, tuple(hf_shape), np.dtype(x.dtype), fetch))
    hf_io.write_entries(path, entries, vl_config_to_hf_dict(cfg), max_shard_bytes=1 << 62)
    return path
