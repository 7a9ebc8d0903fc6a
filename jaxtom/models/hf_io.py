"""Hugging Face safetensors directories <-> sharded decoder state.

Tensors are memory-mapped and each device reads only its own slice
(`jax.make_array_from_callback`), so an 8B checkpoint never has a second full host copy.
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path
from typing import Callable, Iterable

import jax
import ml_dtypes
import numpy as np
from flax import nnx
from jax.sharding import Mesh, SingleDeviceSharding

from jaxtom import parallel
from jaxtom.models.config import ModelConfig, config_to_hf_dict, load_hf_config
from jaxtom.models.decoder import Decoder

_ST_DTYPES = {"F32": np.float32, "F16": np.float16, "BF16": ml_dtypes.bfloat16,
              "F64": np.float64, "I64": np.int64, "I32": np.int32}
_ST_NAMES = {np.dtype(v): k for k, v in _ST_DTYPES.items()}
# HF names that carry no learned state we need.
_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)


def hf_tensor_name(param: str, layer: int | None = None) -> str:
    """Our parameter name (e.g. 'layers.q_proj') -> the HF tensor name for one layer."""
    if param == "embed_tokens":
        return "model.embed_tokens.weight"
    if param == "norm":
        return "model.norm.weight"
    if param == "lm_head":
        return "lm_head.weight"
    name = param.removeprefix("layers.")
    base, suffix = (name[:-5], "bias") if name.endswith("_bias") else (name, "weight")
    group = "mlp" if base in ("gate_proj", "up_proj", "down_proj") else (
        "" if base.endswith("layernorm") else "self_attn")
    middle = f"{group}.{base}" if group else base
    return f"model.layers.{layer}.{middle}.{suffix}"


def is_transposed(param: str) -> bool:
    """Linear kernels are [in, out] here and [out, in] in PyTorch."""
    return param.endswith("_proj") or param == "lm_head"


class SafetensorsSource:
    """Memory-mapped tensors of one or many `.safetensors` files."""

    def __init__(self, files: Iterable[Path]):
        self._index: dict[str, tuple[Path, str, tuple[int, ...], int]] = {}
        self._maps: dict[Path, np.memmap] = {}
        for file in files:
            with open(file, "rb") as fh:
                (n,) = struct.unpack("<Q", fh.read(8))
                header = json.loads(fh.read(n))
            header.pop("__metadata__", None)
            for name, info in header.items():
                if info["dtype"] not in _ST_DTYPES:
                    raise ValueError(f"tensor {name!r} in {file} has unsupported dtype "
                                     f"{info['dtype']}; supported: {sorted(_ST_DTYPES)}")
                self._index[name] = (file, info["dtype"], tuple(info["shape"]),
                                     8 + n + info["data_offsets"][0])

    @property
    def names(self) -> set[str]:
        return set(self._index)

    def shape(self, name: str) -> tuple[int, ...]:
        return self._index[name][2]

    def read(self, name: str) -> np.ndarray:
        """A lazy (memory-mapped) view; slicing it reads only the slice."""
        file, dtype, shape, offset = self._index[name]
        if file not in self._maps:
            self._maps[file] = np.memmap(file, dtype=np.uint8, mode="r")
        count = math.prod(shape)
        itemsize = np.dtype(_ST_DTYPES[dtype]).itemsize
        raw = self._maps[file][offset:offset + count * itemsize]
        return raw.view(_ST_DTYPES[dtype]).reshape(shape)


class ArraySource:
    """In-memory tensors (e.g. dequantized GGUF) behind the same interface."""

    def __init__(self, arrays: dict[str, np.ndarray]):
        self._arrays = arrays

    @property
    def names(self) -> set[str]:
        return set(self._arrays)

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self._arrays[name].shape)

    def read(self, name: str) -> np.ndarray:
        return self._arrays[name]


def open_hf_dir(path: Path) -> SafetensorsSource:
    index = path / "model.safetensors.index.json"
    if index.exists():
        files = sorted({path / f for f in json.loads(index.read_text())["weight_map"].values()})
    elif (path / "model.safetensors").exists():
        files = [path / "model.safetensors"]
    else:
        files = sorted(path.glob("*.safetensors"))
    if not files:
        raise FileNotFoundError(f"no model.safetensors or model.safetensors.index.json in {path}")
    return SafetensorsSource(files)


def _expected_tensors(cfg: ModelConfig, state) -> dict[str, tuple[str, int | None, tuple]]:
    """HF name -> (our param path, layer or None, expected HF shape)."""
    out = {}
    for path, var in nnx.to_flat_state(state):
        param = ".".join(str(p) for p in path)
        shape = tuple(var.get_value().shape)
        layers = range(cfg.num_layers) if param.startswith("layers.") else [None]
        per = shape[1:] if param.startswith("layers.") else shape
        hf_shape = per[::-1] if is_transposed(param) else per
        for layer in layers:
            out[hf_tensor_name(param, layer)] = (param, layer, hf_shape)
    return out


def check_tensors(cfg: ModelConfig, state, source) -> None:
    """Raises one error listing every missing, unexpected or mis-shaped tensor."""
    expected = _expected_tensors(cfg, state)
    have = {n for n in source.names if not n.endswith(_IGNORED_SUFFIXES)}
    if cfg.tie_word_embeddings:
        have.discard("lm_head.weight")
    problems = []
    missing = sorted(set(expected) - have)
    if missing:
        problems.append(f"missing tensors {missing[:8]}{' ...' if len(missing) > 8 else ''}")
    unexpected = sorted(have - set(expected))
    if unexpected:
        problems.append(f"unexpected tensors {unexpected[:8]}"
                        f"{' ...' if len(unexpected) > 8 else ''}")
    for name in sorted(set(expected) & have):
        if tuple(source.shape(name)) != expected[name][2]:
            problems.append(f"tensor {name!r} has shape {tuple(source.shape(name))}, "
                            f"expected {expected[name][2]} for {cfg.architecture}")
    if problems:
        raise ValueError("checkpoint does not match config.json: " + "; ".join(problems))


def _reader(param: str, source, dtype, stacked: bool, num_layers: int) -> Callable:
    """Callback giving the block `index` (our layout) of one parameter."""
    transposed = is_transposed(param)

    def one(hf_name, idx):
        arr = source.read(hf_name)
        block = arr[tuple(idx[::-1])].T if transposed else arr[tuple(idx)]
        return np.asarray(block, dtype=np.float32).astype(dtype)

    def read(index):
        if not stacked:
            return one(hf_tensor_name(param), index)
        layers = range(*index[0].indices(num_layers))
        return np.stack([one(hf_tensor_name(param, i), index[1:]) for i in layers])

    return read


def load_state(cfg: ModelConfig, source, mesh: Mesh | None = None):
    """Builds a Decoder whose parameters are read straight into their (sharded) places."""
    abstract = nnx.eval_shape(lambda: Decoder(cfg, rngs=nnx.Rngs(0)))
    graphdef, state = nnx.split(abstract)
    check_tensors(cfg, state, source)
    dtype = np.dtype(cfg.param_dtype) if cfg.param_dtype != "bfloat16" else ml_dtypes.bfloat16

    def reader(path):
        param = ".".join(str(p) for p in path)
        return _reader(param, source, dtype, param.startswith("layers."), cfg.num_layers)

    return read_into_place(graphdef, state, mesh, reader)


def read_into_place(graphdef, state, mesh: Mesh | None, reader):
    """The model with each parameter read by `reader(path)` (a callback from an index to the
    array's slice) straight into its place: one device, or its logical axes on `mesh`, so no
    process ever holds more than its own shards."""
    def place(path, var):
        shape = tuple(var.get_value().shape)
        if mesh is None:
            sharding = SingleDeviceSharding(jax.devices()[0])
        else:
            axes = parallel.variable_axes(var) or (None,) * len(shape)
            sharding = parallel.named_sharding(mesh, axes, shape)
        return var.replace(jax.make_array_from_callback(shape, sharding, reader(path)))

    flat = [(path, place(path, var)) for path, var in nnx.to_flat_state(state)]
    return nnx.merge(graphdef, nnx.from_flat_state(flat))


def from_pretrained_hf(path: str | Path, *, dtype: str = "float32",
                       compute_dtype: str | None = None, mesh: Mesh | None = None) -> Decoder:
    path = Path(path)
    cfg = load_hf_config(path, dtype=dtype, compute_dtype=compute_dtype)
    if mesh is not None:
        check_mesh_fits(cfg, mesh)
    return load_state(cfg, open_hf_dir(path), mesh)


def check_mesh_fits(cfg: ModelConfig, mesh: Mesh) -> None:
    t = mesh.shape["tensor"]
    for name, n in (("num_attention_heads", cfg.num_heads),
                    ("num_key_value_heads", cfg.num_kv_heads)):
        if n % t:
            raise ValueError(f"mesh tensor axis ({t}) does not divide {name} ({n}); choose a "
                             f"tensor size that divides both head counts")


def _host_array(x) -> np.ndarray:
    if not x.is_fully_addressable:
        from jax.experimental import multihost_utils
        x = multihost_utils.process_allgather(x, tiled=True)
    return np.asarray(jax.device_get(x))


def save_pretrained(model: Decoder, path: str | Path, *, max_shard_bytes: int = 4 << 30) -> Path:
    """Writes config.json + safetensors (sharded with an index when large); LoRA is merged."""
    from jaxtom.models.lora import merge_lora

    model = merge_lora(model)
    cfg = model.config
    path = Path(path)
    tensors: dict[str, np.ndarray] = {}
    for p, var in nnx.to_flat_state(nnx.state(model, nnx.Param)):
        param = ".".join(str(x) for x in p)
        arr = _host_array(var.get_value())
        for layer, block in ([(i, arr[i]) for i in range(arr.shape[0])]
                             if param.startswith("layers.") else [(None, arr)]):
            tensors[hf_tensor_name(param, layer)] = np.ascontiguousarray(
                block.T if is_transposed(param) else block)
    if jax.process_index() != 0:
        return path
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(config_to_hf_dict(cfg), indent=2))
    shards, current, size = [], {}, 0
    for name in sorted(tensors):
        if current and size + tensors[name].nbytes > max_shard_bytes:
            shards.append(current)
            current, size = {}, 0
        current[name] = tensors[name]
        size += tensors[name].nbytes
    shards.append(current)
    if len(shards) == 1:
        _write_safetensors(path / "model.safetensors", shards[0])
        return path
    weight_map = {}
    for i, shard in enumerate(shards):
        fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
        _write_safetensors(path / fname, shard)
        weight_map.update({n: fname for n in shard})
    total = sum(t.nbytes for t in tensors.values())
    (path / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2))
    return path


def _write_safetensors(file: Path, tensors: dict[str, np.ndarray]) -> None:
    """Safetensors writer that also handles bfloat16 numpy arrays."""
    header, offset = {}, 0
    for name, arr in tensors.items():
        header[name] = {"dtype": _ST_NAMES[arr.dtype], "shape": list(arr.shape),
                        "data_offsets": [offset, offset + arr.nbytes]}
        offset += arr.nbytes
    header["__metadata__"] = {"format": "pt"}
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    with open(file, "wb") as fh:
        fh.write(struct.pack("<Q", len(blob)) + blob)
        for arr in tensors.values():
            fh.write(arr.tobytes())
