"""Byte ranges of a box of a row-major tensor in a file, and reading exactly those ranges.

A device's shard of a checkpoint tensor is a box (a start and stop per axis); its bytes are
one run per row of the axes before the last partial one. Reading those runs, and nothing
else, keeps what a host reads equal to what its devices hold, whether the file is local or
in an object store.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import BinaryIO

import numpy as np
from fsspec.spec import AbstractBufferedFile

Box = tuple[tuple[int, int], ...]  # (start, stop) per axis
# ranges per `cat_ranges` call: an async filesystem makes a coroutine per range up front,
# so a tensor's hundreds of thousands of rows go out in slices of this many
CALL_RANGES = 8192


def box_ranges(shape: Sequence[int], itemsize: int, offset: int, box: Box
               ) -> tuple[np.ndarray, int]:
    """(start of each run, bytes per run) of `box` in a C-order tensor of `shape` whose
    first byte is at `offset`. The runs in order hold the box in C order; axes after the
    last partial one are whole, so each run spans that axis's range times their extent."""
    if len(box) != len(shape):
        raise ValueError(f"box {box} has {len(box)} axes, the tensor {tuple(shape)} has "
                         f"{len(shape)}")
    for (a, b), n in zip(box, shape):
        if not 0 <= a <= b <= n:
            raise ValueError(f"box {box} does not lie inside the tensor {tuple(shape)}")
    if any(a == b for a, b in box):
        return np.zeros(0, np.int64), 0
    strides = [itemsize * math.prod(shape[i + 1:]) for i in range(len(shape))]
    partial = [i for i, ((a, b), n) in enumerate(zip(box, shape)) if (a, b) != (0, n)]
    if not partial:
        return np.array([offset], np.int64), itemsize * math.prod(shape)
    k = partial[-1]
    starts = np.array([offset + box[k][0] * strides[k]], np.int64)
    for axis in range(k - 1, -1, -1):  # innermost outer axis first, so axis 0 varies slowest
        a, b = box[axis]
        starts = (np.arange(a, b, dtype=np.int64)[:, None] * strides[axis]
                  + starts[None, :]).ravel()
    return starts, (box[k][1] - box[k][0]) * strides[k]


def read_ranges(fh: BinaryIO, starts: Sequence[int], ends: Sequence[int], what: str
                ) -> list[bytes]:
    """The bytes [start, end) of each range of an open binary file. An object store's
    file (an fsspec buffered file, as gcsfs and s3fs give through epath) is read through its
    filesystem's `cat_ranges`, which asks for exactly these ranges (concurrently where the
    filesystem can) instead of the file's read-ahead blocks; any other file by seek and
    read. `what` names the file in the error raised when a range comes back short."""
    starts, ends = [int(s) for s in starts], [int(e) for e in ends]
    if isinstance(fh, AbstractBufferedFile):
        chunks = []
        for i in range(0, len(starts), CALL_RANGES):
            part = slice(i, i + CALL_RANGES)
            chunks += fh.fs.cat_ranges([fh.path] * len(starts[part]), starts[part],
                                       ends[part], on_error="raise")
    else:
        chunks = []
        for s, e in zip(starts, ends):
            fh.seek(s)
            chunks.append(fh.read(e - s))
    for chunk, s, e in zip(chunks, starts, ends):
        if len(chunk) != e - s:
            raise ValueError(f"{what}: reading bytes [{s}, {e}) gave {len(chunk)} bytes "
                             f"(truncated or changed while reading?)")
    return chunks
