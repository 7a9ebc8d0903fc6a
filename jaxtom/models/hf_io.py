"""Hugging Face safetensors directories <-> sharded decoder state.

Each process reads, by byte range, only the blocks of the tensors its devices hold, once
however many of its devices hold the same block, so an 8B checkpoint never has a second
full host copy and no host fetches another's share. A directory may be local or remote
(`gs://...`, through etils.epath). Exporting streams one tensor at a time to process 0,
which alone writes.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import struct
from typing import Callable, Iterable

import jax
import ml_dtypes
import numpy as np
from etils import epath
from flax import nnx
from jax.sharding import Mesh, NamedSharding, PartitionSpec, SingleDeviceSharding

from jaxtom import parallel, storage
from jaxtom.errors import BadInputError, MissingInputError
from jaxtom.models.byte_ranges import Box, box_ranges, read_ranges
from jaxtom.models.config import ModelConfig, config_to_hf_dict, load_hf_config
from jaxtom.models.decoder import Decoder
from jaxtom.models.lora import merge_lora

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
    """Tensors of one or many `.safetensors` files, local or remote (`gs://...`, through
    epath), read by byte range: a box of a tensor costs exactly its bytes. Every header and
    every tensor's byte range is checked against its file's size when opened, so a truncated
    or garbled file fails with one error naming the file and the tensor instead of deep
    inside a reshape."""

    def __init__(self, files: Iterable, origin=None):
        files = [storage.path(f) for f in files]
        # what error messages name: the model directory, or the one file
        self.origin = str(origin if origin is not None else
                          files[0] if len(files) == 1 else files[0].parent if files else "")
        self._index: dict[str, tuple[epath.Path, str, tuple[int, ...], int]] = {}
        for file in files:
            for name, entry in _read_header(file).items():
                self._index[name] = (file, *entry)

    @property
    def names(self) -> set[str]:
        return set(self._index)

    def shape(self, name: str) -> tuple[int, ...]:
        return self._index[name][2]

    def read(self, name: str) -> np.ndarray:
        """One whole tensor."""
        return self.read_boxes([(name, tuple((0, n) for n in self.shape(name)))])[0]

    def read_boxes(self, requests: list[tuple[str, Box]]) -> list[np.ndarray]:
        """The box (a start and stop per axis) of each named tensor, reading only the box's
        bytes; the requests of one file go out as one batch of byte ranges."""
        runs, by_file = [], {}
        for i, (name, box) in enumerate(requests):
            file, dtype, shape, offset = self._index[name]
            starts, size = box_ranges(shape, np.dtype(_ST_DTYPES[dtype]).itemsize, offset,
                                      tuple(box))
            runs.append((starts, size))
            by_file.setdefault(file, []).append(i)
        raw: list[bytes] = [b""] * len(requests)
        for file, members in by_file.items():
            starts = np.concatenate([runs[i][0] for i in members])
            ends = starts + np.concatenate([np.full(len(runs[i][0]), runs[i][1], np.int64)
                                            for i in members])
            with file.open("rb") as fh:
                chunks = read_ranges(fh, starts, ends, str(file))
            at = 0
            for i in members:
                n = len(runs[i][0])
                raw[i] = chunks[at] if n == 1 else b"".join(chunks[at:at + n])
                chunks[at:at + n] = [b""] * n  # each run's bytes held once at a time
                at += n
        out = []
        for (name, box), data in zip(requests, raw):
            dtype = _ST_DTYPES[self._index[name][1]]
            out.append(np.frombuffer(data, dtype).reshape([b - a for a, b in box]))
        return out


def _read_header(file: epath.Path) -> dict[str, tuple[str, tuple[int, ...], int]]:
    """name -> (dtype, shape, absolute byte offset) of one file, after checking the header
    parses and each tensor's bytes lie inside the file."""
    damaged = "(truncated or damaged checkpoint?)"
    with file.open("rb") as fh:
        size = fh.seek(0, 2)
        if size < 8:
            raise BadInputError(f"{file}: {size} bytes is too short for a safetensors header "
                                f"{damaged}")
        (head,) = read_ranges(fh, [0], [8], str(file))
        (n,) = struct.unpack("<Q", head)
        if 8 + n > size:
            raise BadInputError(f"{file}: the header claims {n} bytes but the file has {size} "
                                f"bytes {damaged}")
        (blob,) = read_ranges(fh, [8], [8 + n], str(file))
    try:
        header = json.loads(blob)
    except ValueError as err:  # json.JSONDecodeError and UnicodeDecodeError included
        raise BadInputError(f"{file}: garbled safetensors header ({err}) {damaged}") from None
    if not isinstance(header, dict):
        raise BadInputError(f"{file}: garbled safetensors header (a JSON "
                            f"{type(header).__name__}, not an object) {damaged}")
    header.pop("__metadata__", None)
    out = {}
    for name, info in header.items():
        try:
            dtype, shape, (a, b) = info["dtype"], tuple(info["shape"]), info["data_offsets"]
        except (KeyError, TypeError, ValueError):
            raise BadInputError(f"{file}: tensor {name!r} has a garbled header entry {info!r}; "
                                f"expected dtype, shape and data_offsets {damaged}") from None
        if dtype not in _ST_DTYPES:
            raise BadInputError(f"tensor {name!r} in {file} has unsupported dtype {dtype}; "
                                f"supported: {sorted(_ST_DTYPES)}")
        need = math.prod(shape) * np.dtype(_ST_DTYPES[dtype]).itemsize
        if b - a != need or a < 0:
            raise BadInputError(f"{file}: tensor {name!r} of shape {shape} and dtype {dtype} "
                                f"needs {need} bytes but its data_offsets [{a}, {b}) hold "
                                f"{b - a} {damaged}")
        if 8 + n + b > size:
            raise BadInputError(f"{file}: tensor {name!r} needs bytes [{8 + n + a}, "
                                f"{8 + n + b}) but the file has {size} bytes {damaged}")
        out[name] = (dtype, shape, 8 + n + a)
    return out


class ArraySource:
    """In-memory tensors (e.g. dequantized GGUF) behind the same interface."""

    def __init__(self, arrays: dict[str, np.ndarray], origin: str = "in-memory tensors"):
        self._arrays, self.origin = arrays, str(origin)

    @property
    def names(self) -> set[str]:
        return set(self._arrays)

    def shape(self, name: str) -> tuple[int, ...]:
        return tuple(self._arrays[name].shape)

    def read(self, name: str) -> np.ndarray:
        return self._arrays[name]

    def read_boxes(self, requests: list[tuple[str, Box]]) -> list[np.ndarray]:
        return [self._arrays[name][tuple(slice(a, b) for a, b in box)]
                for name, box in requests]


def open_hf_dir(path) -> SafetensorsSource:
    path = storage.path(path)
    index = path / "model.safetensors.index.json"
    if index.exists():
        files = sorted({path / f for f in json.loads(index.read_text())["weight_map"].values()})
    elif (path / "model.safetensors").exists():
        files = [path / "model.safetensors"]
    else:
        files = sorted(path.glob("*.safetensors"))
    if not files:
        raise MissingInputError(f"{path}: no model.safetensors or model.safetensors.index.json "
                                f"(expected a Hugging Face model directory)")
    return SafetensorsSource(files, origin=path)


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
        where = getattr(source, "origin", "checkpoint")
        raise BadInputError(f"{where}: the tensors do not match its config: "
                            + "; ".join(problems))


def _reader(param: str, source, dtype, stacked: bool) -> Callable:
    """Callback giving the block `index` (our layout, slices with a start and stop) of one
    parameter; a stacked parameter's layers are read in one batch of byte ranges."""
    transposed = is_transposed(param)

    def read(index):
        layers = range(index[0].start, index[0].stop) if stacked else [None]
        ours = index[1:] if stacked else index
        box = tuple((s.start, s.stop) for s in (ours[::-1] if transposed else ours))
        raw = source.read_boxes([(hf_tensor_name(param, i), box) for i in layers])
        out = np.empty((len(layers), *(s.stop - s.start for s in ours)), dtype)
        for i in range(len(raw)):  # converted into place, each raw block dropped when done
            b, raw[i] = raw[i], None
            out[i] = np.asarray(b.T if transposed else b, dtype=np.float32).astype(dtype)
        return out if stacked else out[0]

    return read


def load_state(cfg: ModelConfig, source, mesh: Mesh | None = None):
    """Builds a Decoder whose parameters are read straight into their (sharded) places."""
    abstract = nnx.eval_shape(lambda: Decoder(cfg, rngs=nnx.Rngs(0)))
    graphdef, state = nnx.split(abstract)
    check_tensors(cfg, state, source)
    dtype = np.dtype(cfg.param_dtype) if cfg.param_dtype != "bfloat16" else ml_dtypes.bfloat16

    def reader(path):
        param = ".".join(str(p) for p in path)
        return _reader(param, source, dtype, param.startswith("layers."))

    return read_into_place(graphdef, state, mesh, reader)


def _box(index: tuple[slice, ...], shape: tuple[int, ...]) -> Box:
    out = []
    for s, n in zip(index, shape):
        a, b, step = s.indices(n)
        if step != 1:
            raise ValueError(f"shard index {index} of shape {shape} has a step; expected "
                             f"contiguous blocks")
        out.append((a, b))
    return tuple(out)


def _volume(box: Box) -> int:
    return math.prod(b - a for a, b in box)


def host_reads(boxes: Iterable[Box]) -> list[Box]:
    """The boxes a process reads to fill its devices' blocks `boxes`: their bounding box
    when the distinct blocks tile it (devices next to each other on the mesh), else each
    distinct block; either way a block several devices hold is read once."""
    distinct = sorted(set(boxes))
    if len(distinct) <= 1:
        return distinct
    disjoint = all(any(b1 <= a2 or b2 <= a1 for (a1, b1), (a2, b2) in zip(p, q))
                   for i, p in enumerate(distinct) for q in distinct[i + 1:])
    bound = tuple((min(a for a, _ in axis), max(b for _, b in axis))
                  for axis in zip(*distinct))
    if disjoint and sum(map(_volume, distinct)) == _volume(bound):
        return [bound]
    return distinct


def read_into_place(graphdef, state, mesh: Mesh | None, reader):
    """The model with each parameter read by `reader(path)` (a callback from an index, slices
    with a start and stop, to the array's block) straight into its place: one device, or its
    logical axes on `mesh`. Each process reads only its own devices' blocks, each once
    (`host_reads`), so no process ever holds or fetches more than its own shards."""
    def place(path, var):
        shape = tuple(var.get_value().shape)
        if mesh is None:
            sharding = SingleDeviceSharding(jax.devices()[0])
        else:
            axes = parallel.variable_axes(var) or (None,) * len(shape)
            sharding = parallel.named_sharding(mesh, axes, shape)
        read = reader(path)
        wanted = [_box(i, shape) for i in sharding.addressable_devices_indices_map(shape).values()]
        blocks = {box: read(tuple(slice(a, b) for a, b in box)) for box in host_reads(wanted)}

        def cut(index):
            want = _box(index, shape)
            for box, block in blocks.items():
                if all(a <= c and d <= b for (a, b), (c, d) in zip(box, want)):
                    return block[tuple(slice(c - a, d - a) for (a, _), (c, d) in zip(box, want))]
            raise AssertionError(f"no block read for shard {want} of {path}")

        return var.replace(jax.make_array_from_callback(shape, sharding, cut))

    flat = [(path, place(path, var)) for path, var in nnx.to_flat_state(state)]
    return nnx.merge(graphdef, nnx.from_flat_state(flat))


def from_pretrained_hf(path, *, dtype: str = "float32",
                       compute_dtype: str | None = None, mesh: Mesh | None = None) -> Decoder:
    path = storage.path(path)
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


def _replicated(sharding: NamedSharding) -> NamedSharding:
    return NamedSharding(sharding.mesh, PartitionSpec())


@functools.cache
def _gatherers(rep: NamedSharding):
    """(whole, one layer) -> the tensor replicated over `rep`'s mesh, compiled once."""
    whole = jax.jit(lambda a: a, out_shardings=rep)
    layer = jax.jit(lambda a, i: jax.lax.dynamic_index_in_dim(a, i, 0, keepdims=False),
                    out_shardings=rep)
    return whole, layer


def host_block(x: jax.Array, layer: int | None = None) -> np.ndarray | None:
    """`x` (or its stacked `layer`) as a numpy array on process 0 and None elsewhere. An
    array spread over processes is gathered one tensor at a time (a bounded transient on
    the devices) and copied to host memory on process 0 only; every process must make the
    same calls in the same order (they are collectives)."""
    if not x.is_fully_addressable:
        if not isinstance(x.sharding, NamedSharding):
            raise TypeError(f"cannot export an array spread over processes with "
                            f"{type(x.sharding).__name__}; expected a NamedSharding")
        whole, one = _gatherers(_replicated(x.sharding))
        x = whole(x) if layer is None else one(x, layer)
        return np.asarray(x.addressable_data(0)) if jax.process_index() == 0 else None
    if jax.process_index() != 0:
        return None
    return np.asarray(jax.device_get(x if layer is None else x[layer]))


@dataclasses.dataclass(frozen=True)
class Entry:
    """One tensor to export: its HF name, shape and dtype (known without the data) and
    `fetch()`, which returns the data on process 0 and None elsewhere (a collective)."""
    name: str
    shape: tuple[int, ...]
    dtype: np.dtype
    fetch: Callable[[], np.ndarray | None]

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * np.dtype(self.dtype).itemsize


def decoder_entries(model: Decoder, rename: Callable[[str], str] = lambda n: n) -> list[Entry]:
    """The HF tensors of a (LoRA-merged) decoder, one layer each, not yet fetched."""
    out = []
    for p, var in nnx.to_flat_state(nnx.state(model, nnx.Param)):
        param = ".".join(str(x) for x in p)
        x = var.get_value()
        transposed = is_transposed(param)
        stacked = param.startswith("layers.")
        per = tuple(x.shape[1:] if stacked else x.shape)
        for layer in range(x.shape[0]) if stacked else [None]:
            def fetch(x=x, layer=layer, transposed=transposed):
                block = host_block(x, layer)
                return None if block is None else block.T if transposed else block
            out.append(Entry(rename(hf_tensor_name(param, layer)),
                             per[::-1] if transposed else per, np.dtype(x.dtype), fetch))
    return out


def save_pretrained(model: Decoder, path, *, max_shard_bytes: int = 4 << 30):
    """Writes config.json + safetensors (sharded with an index when large); LoRA is merged.
    Process 0 writes; every process takes part in gathering one tensor at a time, so no
    host ever holds more than one tensor of the model (see `write_entries`)."""

    model = merge_lora(model)
    path = storage.path(path)
    write_entries(path, decoder_entries(model), config_to_hf_dict(model.config),
                  max_shard_bytes)
    return path


def write_entries(path: epath.Path, entries: list[Entry], config: dict,
                  max_shard_bytes: int = 4 << 30) -> None:
    """config.json plus the entries as safetensors files of at most `max_shard_bytes` each
    (a single tensor may exceed it), with model.safetensors.index.json when more than one.
    Tensors are sorted by name and streamed into their file one by one, on every process in
    the same order; only process 0 writes."""
    entries = sorted(entries, key=lambda e: e.name)
    shards, size = [[]], 0
    for e in entries:
        if shards[-1] and size + e.nbytes > max_shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(e)
        size += e.nbytes
    writer = jax.process_index() == 0
    if writer:
        path.mkdir(parents=True, exist_ok=True)
        (path / "config.json").write_text(json.dumps(config, indent=2))
    names = (["model.safetensors"] if len(shards) == 1 else
             [f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors" for i in range(len(shards))])
    for fname, shard in zip(names, shards):
        _stream_safetensors(path / fname if writer else None, shard)
    if writer and len(shards) > 1:
        weight_map = {e.name: fname for fname, shard in zip(names, shards) for e in shard}
        (path / "model.safetensors.index.json").write_text(json.dumps(
            {"metadata": {"total_size": sum(e.nbytes for e in entries)},
             "weight_map": weight_map}, indent=2))


def _stream_safetensors(file: epath.Path | None, entries: list[Entry]) -> None:
    """The header from the entries' shapes, then each tensor fetched, written and dropped;
    `file` None (processes other than 0) still fetches, as fetching is collective."""
    header, offset = {}, 0
    for e in entries:
        header[e.name] = {"dtype": _ST_NAMES[np.dtype(e.dtype)], "shape": list(e.shape),
                          "data_offsets": [offset, offset + e.nbytes]}
        offset += e.nbytes
    header["__metadata__"] = {"format": "pt"}
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)
    fh = None if file is None else file.open("wb")
    try:
        if fh is not None:
            fh.write(struct.pack("<Q", len(blob)) + blob)
        for e in entries:
            arr = e.fetch()
            if fh is None:
                continue
            if tuple(arr.shape) != tuple(e.shape) or arr.dtype != e.dtype:
                raise ValueError(f"tensor {e.name!r} fetched as {arr.shape} {arr.dtype}, "
                                 f"expected {e.shape} {e.dtype}")
            fh.write(np.ascontiguousarray(arr).tobytes())
    finally:
        if fh is not None:
            fh.close()


def _write_safetensors(file, tensors: dict[str, np.ndarray]) -> None:
    """Host arrays (bfloat16 included) as one safetensors file."""
    _stream_safetensors(storage.path(file), [
        Entry(n, tuple(a.shape), a.dtype, lambda a=a: a) for n, a in tensors.items()])
