"""When a training run stops early: SIGTERM, on one process or at JAX's preemption sync point.

SIGTERM is how a run is asked to stop: `launch/tpu_pod.sh --stop`, SLURM's `scancel`, a
TPU maintenance event or a spot preemption. The trainer then finishes the step in progress,
saves a checkpoint at that step, waits for the write and raises `TrainingStopped`; the
`jaxtom` commands turn it into one line on stderr and exit status `STOP_EXIT_CODE`.

Where `jax.distributed` is initialised, JAX's preemption service owns SIGTERM: its notifier
catches the signal on whichever process receives it, tells the others through the
coordination service, and `multihost_utils.reached_preemption_sync_point` then names the
same step on every process (one past the furthest any process had reached), so all save
that step and leave together. A Python handler there would replace JAX's and leave each
process to stop at a step of its own (and hang the others in the next collective), so none
is installed. Without `jax.distributed`, `StopSignal` installs its own SIGTERM handler for
the duration of the run (the main thread only: Python delivers signals there) and puts the
previous one back after.
"""

from __future__ import annotations

import itertools
import signal
import sys
import threading

import jax
from jax.experimental import multihost_utils

STOP_EXIT_CODE = 143  # 128 + SIGTERM: what schedulers (SLURM, JobSet) read as "terminated"

# the sync point counts calls, which must form the same sequence on every process: one count
# for the whole process, so the phases of a run (warm-up, then SSRL) continue one sequence
_sync_calls = itertools.count(1)


class TrainingStopped(Exception):
    """A run stopped on request after saving `step`'s checkpoint under `checkpoint_dir` (the
    write has finished); the same command resumes it."""

    exit_code = STOP_EXIT_CODE

    def __init__(self, step: int, checkpoint_dir: str, cause: str):
        super().__init__(step, checkpoint_dir, cause)
        self.step, self.checkpoint_dir, self.cause = step, checkpoint_dir, cause

    def __str__(self) -> str:
        return (f"stopped by {self.cause} (exit {self.exit_code}); checkpoint at step "
                f"{self.step} saved to {self.checkpoint_dir}; rerun the same command to resume")


def jax_preemption_service() -> bool:
    """True when `jax.distributed` runs with its preemption service (JAX's default)."""
    return jax.distributed.is_initialized() and bool(jax.config.jax_enable_preemption_service)


class StopSignal:
    """A context manager for one run; `requested()`, called once after every step on every
    process, returns what asked the run to stop (None: carry on)."""

    def __init__(self):
        self.mode, self.caught, self.previous = "none", None, None

    def __enter__(self) -> "StopSignal":
        self.caught, self.previous = None, None
        if jax_preemption_service():
            self.mode = "jax"
        elif jax.process_count() > 1:
            # several processes without JAX's service: nothing can agree on a step, so SIGTERM
            # keeps its default (the processes end at once; the newest checkpoint remains)
            self.mode = "none"
            print("jaxtom: warning: jax.distributed runs without its preemption service "
                  "(jax_enable_preemption_service is off): SIGTERM ends the run without a "
                  "checkpoint", file=sys.stderr)
        elif threading.current_thread() is threading.main_thread():
            self.previous = signal.getsignal(signal.SIGTERM)
            # None: a handler installed outside Python, which could not be put back
            self.mode = "signal" if self.previous is not None else "none"
            if self.mode == "signal":
                signal.signal(signal.SIGTERM, self._on_signal)
        else:
            self.mode = "none"
        return self

    def _on_signal(self, signum, frame) -> None:
        self.caught = signal.Signals(signum).name

    def __exit__(self, *exc) -> None:
        if self.mode == "signal":
            signal.signal(signal.SIGTERM, self.previous)
        self.previous = None

    def requested(self) -> str | None:
        if self.mode == "jax":
            if multihost_utils.reached_preemption_sync_point(next(_sync_calls)):
                return "SIGTERM at JAX's preemption sync point"
            return None
        return self.caught
