"""The trainer's stop on SIGTERM, in this process: the step in progress completes, its
checkpoint is written, `TrainingStopped` names it and the previous SIGTERM handler is back
(that a rerun from it ends where an uninterrupted run ends: tests/commands/test_preemption.py).
"""

import json
import os
import signal

import pytest

from jaxtom import rl
from jaxtom.rl.preemption import STOP_EXIT_CODE, StopSignal, TrainingStopped
from jaxtom.rl.toy import TargetTokenReward, toy_token_tasks
from jaxtom.rl.trainer import CompletionRollout, Trainer, TrainerConfig
from tests.rl.common import TINY, tiny_model

STEPS = 4


class SignalDuring:
    """A rollout that sends this process SIGTERM while it works on step `step` (0-based)
    and raises `error` there instead when given."""

    def __init__(self, inner, step: int, error: Exception | None = None):
        self.inner, self.step, self.error = inner, step, error

    def __call__(self, model, tasks, key, step):
        if step == self.step:
            if self.error is not None:
                raise self.error
            os.kill(os.getpid(), signal.SIGTERM)
        return self.inner(model, tasks, key, step)


def trainer(workdir, wrap=None) -> Trainer:
    cfg = TrainerConfig(workdir=str(workdir), total_steps=STEPS, group_size=4,
                        prompts_per_step=4, max_new_tokens=6, row_len=16,
                        checkpoint_every=100, progress=False)
    rollout = CompletionRollout(TargetTokenReward(3), cfg)
    step_cfg = rl.StepConfig(learning_rate=1e-2, kl_coef=0.01,
                             weight_decay=0.0)
    return Trainer(tiny_model(seed=4), toy_token_tasks(16, 4, TINY.vocab_size, seed=0),
                   wrap(rollout) if wrap else rollout, step_cfg, cfg)


@pytest.fixture
def previous_handler():
    """A SIGTERM handler of the caller's own, which `Trainer.run` must put back."""
    def mine(signum, frame):
        raise AssertionError("the caller's SIGTERM handler ran during a run")

    before = signal.signal(signal.SIGTERM, mine)
    yield mine
    signal.signal(signal.SIGTERM, before)


def test_sigterm_saves_the_step_in_progress(tmp_path, previous_handler):
    stopped = tmp_path / "stopped"
    with pytest.raises(TrainingStopped) as caught:
        trainer(stopped, lambda r: SignalDuring(r, step=1)).run()
    stop = caught.value
    assert (stop.step, stop.cause, stop.exit_code) == (2, "SIGTERM", STOP_EXIT_CODE)
    assert stop.checkpoint_dir == str(stopped / "checkpoints")
    assert str(stop) == (f"stopped by SIGTERM (exit 143); checkpoint at step 2 saved to "
                         f"{stopped / 'checkpoints'}; rerun the same command to resume")
    assert signal.getsignal(signal.SIGTERM) is previous_handler
    # the step's checkpoint only (checkpoint_every=100), finished (orbax's marker file)
    assert sorted(p.name for p in (stopped / "checkpoints").iterdir()) == ["2"]
    assert (stopped / "checkpoints" / "2" / "_CHECKPOINT_METADATA").exists()
    steps = [json.loads(line)["step"] for line in
             (stopped / "metrics.jsonl").read_text().splitlines()]
    assert steps == [1, 2]


def test_the_previous_handler_is_back_after_a_run_that_fails(tmp_path, previous_handler):
    with pytest.raises(ValueError, match="rollout broke"):
        trainer(tmp_path, lambda r: SignalDuring(r, step=0,
                                                 error=ValueError("rollout broke"))).run()
    assert signal.getsignal(signal.SIGTERM) is previous_handler


def test_stop_signal_off_the_main_thread_installs_nothing(previous_handler):
    import threading

    seen = []

    def enter():
        with StopSignal() as stop:
            seen.append((stop.mode, signal.getsignal(signal.SIGTERM)))

    t = threading.Thread(target=enter)
    t.start()
    t.join()
    assert seen == [("none", previous_handler)]
    with StopSignal() as stop:  # the main thread: its own handler, until the block ends
        assert stop.mode == "signal" and stop.requested() is None
        assert signal.getsignal(signal.SIGTERM) == stop._on_signal
    assert signal.getsignal(signal.SIGTERM) is previous_handler
