"""Metrics to tensorboardX and a JSONL file (one object per step), process 0 only."""

from __future__ import annotations

import json
from pathlib import Path

import jax


class MetricsLogger:
    def __init__(self, workdir: str | Path):
        self.active = jax.process_index() == 0
        if not self.active:
            return
        from tensorboardX import SummaryWriter

        workdir = Path(workdir)
        workdir.mkdir(parents=True, exist_ok=True)
        self.writer = SummaryWriter(str(workdir / "tensorboard"))
        self.jsonl = open(workdir / "metrics.jsonl", "a")

    def log(self, step: int, metrics: dict[str, float]) -> None:
        if not self.active:
            return
        for k, v in metrics.items():
            self.writer.add_scalar(k, v, step)
        self.jsonl.write(json.dumps({"step": step, **metrics}) + "\n")
        self.jsonl.flush()

    def close(self) -> None:
        if self.active:
            self.writer.close()
            self.jsonl.close()
