"""Metrics to TensorBoard and a JSONL file (one object per step), process 0 only.

Both go through `etils.epath` (`jaxtom.storage`), so the workdir may be `gs://...`. Object
stores cannot append, so there the JSONL file is rewritten whole at each log (a few KB per
hundred steps); a local or mounted file is appended to. TensorBoard events for a URI are
written by a tensorboardX writer factory backed by epath (tensorboardX's own `gs://` writer
needs google-cloud-storage).
"""

from __future__ import annotations

import json

import jax

from jaxtom import storage


class _EpathEventFile:
    """A tensorboardX record sink on an epath file, rewritten whole on flush."""

    def __init__(self, path: str):
        self.path, self.data = storage.path(path), bytearray()

    def write(self, b: bytes) -> None:
        self.data += b

    def flush(self) -> None:
        with self.path.open("wb") as fh:
            fh.write(bytes(self.data))

    def close(self) -> None:
        self.flush()


class _EpathEventFactory:
    def open(self, path: str):
        return _EpathEventFile(path)

    def directory_check(self, path: str) -> None:
        storage.path(path).mkdir(parents=True, exist_ok=True)


def _summary_writer(logdir):
    from tensorboardX import SummaryWriter, record_writer

    if storage.is_uri(logdir):
        record_writer.register_writer_factory(str(logdir).split(":")[0], _EpathEventFactory())
    return SummaryWriter(str(logdir))


class MetricsLogger:
    def __init__(self, workdir):
        self.active = jax.process_index() == 0
        if not self.active:
            return
        workdir = storage.path(workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        self.writer = _summary_writer(workdir / "tensorboard")
        self.path = workdir / "metrics.jsonl"
        self.rewrite = storage.is_uri(workdir)
        self.lines = (self.path.read_text() if self.rewrite and self.path.exists() else "")
        self.jsonl = None if self.rewrite else self.path.open("a")

    def log(self, step: int, metrics: dict[str, float]) -> None:
        if not self.active:
            return
        for k, v in metrics.items():
            self.writer.add_scalar(k, v, step)
        line = json.dumps({"step": step, **metrics}) + "\n"
        if self.rewrite:
            self.lines += line
            self.path.write_text(self.lines)
        else:
            self.jsonl.write(line)
            self.jsonl.flush()

    def close(self) -> None:
        if self.active:
            self.writer.close()
            if self.jsonl is not None:
                self.jsonl.close()
