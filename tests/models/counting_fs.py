"""Filesystems that count the bytes read from each file, for tests of what a load reads.

- `CountingBucket`: an in-memory fsspec filesystem registered for `gs://`, standing in for
  GCS behind etils.epath exactly as gcsfs does: its files are fsspec buffered files with
  read-ahead blocks, so a reader that seeks and reads pays for the blocks it pulls, and
  every byte leaves the store through `cat_file`, where it is counted.
- `CountingDisk`: epath's local-file backend with each opened file wrapped to count what is
  read from it.
"""

from __future__ import annotations

import collections
import os
from pathlib import Path

import fsspec
import numpy as np
from etils.epath import backend as epath_backend
from etils.epath import gpath
from fsspec.implementations.memory import MemoryFileSystem
from fsspec.spec import AbstractBufferedFile

READ_AHEAD = 5 * 2 ** 20  # fsspec's default block, which gcsfs files use too


class CountingBucket(MemoryFileSystem):
    """`gs://BUCKET/...` kept in memory; `read[path]` counts the bytes served."""

    protocol = ("gs", "gcs")
    root_marker = ""
    store: dict = {}
    pseudo_dirs = [""]
    read: collections.Counter = collections.Counter()

    @classmethod
    def _strip_protocol(cls, path):
        path = os.fspath(path)
        for prefix in ("gs://", "gcs://"):
            path = path.removeprefix(prefix)
        return path.rstrip("/")

    def _open(self, path, mode="rb", block_size=None, autocommit=True, cache_options=None,
              **kwargs):
        if mode != "rb":
            return super()._open(path, mode, block_size, autocommit, cache_options, **kwargs)
        path = self._strip_protocol(path)
        if path not in self.store:
            raise FileNotFoundError(path)
        return AbstractBufferedFile(self, path, "rb", block_size=READ_AHEAD,
                                    cache_type="readahead")

    def cat_file(self, path, start=None, end=None, **kwargs):
        data = super().cat_file(path, start, end, **kwargs)
        self.read[self._strip_protocol(path)] += len(data)
        return data

    @classmethod
    def install(cls) -> CountingBucket:
        """Makes epath's `gs://` paths read this bucket (through its fsspec backend, with
        TensorFlow's gfile ruled out)."""
        for name in cls.protocol:
            fsspec.register_implementation(name, cls, clobber=True)
        gpath._is_tf_installed = lambda: False
        type(epath_backend.fsspec_backend)._get_filesystem.cache_clear()
        return cls()

    def upload(self, local: Path, uri: str) -> None:
        for file in sorted(Path(local).iterdir()):
            self.pipe_file(f"{uri}/{file.name}", file.read_bytes())

    def safetensors_bytes(self) -> int:
        return sum(n for p, n in self.read.items() if p.endswith(".safetensors"))


class _CountingFile:
    """A file whose `read` adds the bytes it returns to `counter[path]`."""

    def __init__(self, fh, path: str, counter: collections.Counter):
        self._fh, self._path, self._counter = fh, path, counter

    def read(self, *args):
        data = self._fh.read(*args)
        self._counter[self._path] += len(data)
        return data

    def readinto(self, buf):
        n = self._fh.readinto(buf)
        self._counter[self._path] += n or 0
        return n

    def __getattr__(self, name):
        return getattr(self._fh, name)

    def __iter__(self):
        raise TypeError("iterate over a counted file through read()")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self._fh.close()


class CountingDisk(epath_backend._OsPathBackend):
    """Local files, through epath, counting the bytes read from each."""

    def __init__(self):
        self.read: collections.Counter = collections.Counter()

    def open(self, path, mode):
        return _CountingFile(super().open(path, mode), os.path.abspath(path), self.read)

    @classmethod
    def install(cls) -> CountingDisk:
        disk = cls()
        gpath._PREFIX_TO_BACKEND[None] = disk
        return disk

    def safetensors_bytes(self) -> int:
        return sum(n for p, n in self.read.items() if p.endswith(".safetensors"))


def header_bytes(directory: Path) -> int:
    """Bytes of the safetensors headers (length prefix included) in `directory`."""
    total = 0
    for file in Path(directory).glob("*.safetensors"):
        with open(file, "rb") as fh:
            total += 8 + int.from_bytes(fh.read(8), "little")
    return total


def host_share(model, itemsize: int) -> int:
    """Bytes of the parameters this process's devices hold, each element once."""
    import jax
    from flax import nnx

    total = 0
    for leaf in jax.tree.leaves(nnx.state(model, nnx.Param)):
        held = np.zeros(leaf.shape, bool)
        for shard in leaf.addressable_shards:
            held[shard.index] = True
        total += int(held.sum()) * itemsize
    return total
