"""Metrics to TensorBoard and a JSONL file (one object per step), process 0 only.

Both go through `etils.epath` (`jaxtom.storage`), so the workdir may be `gs://...`. Object
stores cannot append, so there a file is rewritten whole when flushed (the JSONL file at
each log, a few KB per hundred steps); a local or mounted file is appended to. TensorBoard
events reach epath through a tensorboardX writer factory: the logdir is given to
tensorboardX as `jaxtom-epath:<path>` (its own `gs://` writer needs google-cloud-storage
and its local one uses `open()`).
"""

from __future__ import annotations

import json

import jax

from jaxtom import storage

_SCHEME = "jaxtom-epath"


class _EpathFile:
    """A write-only byte sink on an epath file: streamed when local, kept and rewritten
    whole on flush when the path is an object-store URI."""

    def __init__(self, path):
        self.path = storage.path(path)
        self.data = bytearray() if storage.is_uri(self.path) else None
        self.fh = None if storage.is_uri(self.path) else self.path.open("ab")

    def write(self, b: bytes) -> None:
        if self.fh is None:
            self.data += b
        else:
            self.fh.write(b)

    def flush(self) -> None:
        if self.fh is None:
            with self.path.open("wb") as fh:
                fh.write(bytes(self.data))
        else:
            self.fh.flush()

    def close(self) -> None:
        self.flush()
        if self.fh is not None:
            self.fh.close()


class _EpathEventFactory:
    """tensorboardX's hook for a path prefix (`register_writer_factory`)."""

    @staticmethod
    def _strip(path: str) -> str:
        return path[len(_SCHEME) + 1:]

    def open(self, path: str) -> _EpathFile:
        return _EpathFile(self._strip(path))

    def directory_check(self, path: str) -> None:
        storage.path(self._strip(path)).mkdir(parents=True, exist_ok=True)


def summary_writer(logdir):
    """A tensorboardX SummaryWriter whose event files are written through epath."""
    from tensorboardX import SummaryWriter, record_writer  # heavy: only logging runs use it

    record_writer.register_writer_factory(_SCHEME, _EpathEventFactory())
    return SummaryWriter(f"{_SCHEME}:{logdir}")


class MetricsLogger:
    def __init__(self, workdir):
        self.active = jax.process_index() == 0
        if not self.active:
            return
        workdir = storage.path(workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        self.writer = summary_writer(workdir / "tensorboard")
        path = workdir / "metrics.jsonl"
        self.jsonl = _EpathFile(path)
        if self.jsonl.fh is None and path.exists():  # a resumed run on an object store
            self.jsonl.data += path.read_bytes()

    def log(self, step: int, metrics: dict[str, float]) -> None:
        if not self.active:
            return
        for k, v in metrics.items():
            self.writer.add_scalar(k, v, step)
        self.jsonl.write((json.dumps({"step": step, **metrics}) + "\n").encode())
        self.jsonl.flush()

    def close(self) -> None:
        if self.active:
            self.writer.close()
            self.jsonl.close()
