"""`jaxtom train` stopped by SIGTERM mid-run: it finishes the step in progress, saves that
step's checkpoint on every process, prints one line and exits 143; the same command again
ends bit for bit where an uninterrupted run ends. One process in the default suite; in the
slow ones, two processes x 4 devices under `jax.distributed` (JAX's preemption sync point),
started directly and through `launch/tpu_pod.sh` (`--stop`) on two localhost workers, and a
MindZero run stopped in its warm-up, which starts no SSRL.
"""

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import jax
import numpy as np
import pytest

from tests.commands.test_multiprocess import (MINDZERO, ROOT, checkpoint, finish, launch,
                                              stopped)

STEPS = 10
# the reward sleeps 0.3 s, so a step outlasts the stop's agreement; no periodic checkpoint
# before the end (checkpoint_every), so the one the stop writes is the only one
TOY = ["configs/toy_cpu.py", f"trainer.total_steps={STEPS}",
       "trainer.checkpoint_every=1000", "trainer.keep_checkpoints=5", "mesh.data=-1",
       "step.kl_coef=0.01", "task.name=tests.rl.slow_task:factory"]
STOP_LINE = re.compile(r"jaxtom: stopped by (?P<cause>.+) \(exit 143\); checkpoint at step "
                       r"(?P<step>\d+) saved to (?P<dir>\S+); rerun the same command to resume")


def logged_steps(workdir: Path) -> int:
    path = workdir / "metrics.jsonl"
    return len(path.read_text().splitlines()) if path.exists() else 0


def terminate_after(procs, workdir: Path, steps: int = 2, timeout: float = 600) -> list:
    """Sends SIGTERM to every process once `steps` steps are logged; returns each one's
    (exit status, stderr), waiting up to 60 s for them to exit."""
    deadline = time.time() + timeout
    while logged_steps(workdir) < steps:
        assert all(p.poll() is None for p in procs), stopped(procs)
        assert time.time() < deadline, "no steps logged"
        time.sleep(0.05)
    for p in procs:
        os.kill(p.pid, signal.SIGTERM)
    return [(p.returncode, err) for p in procs
            for _, err in [p.communicate(timeout=60)]]


def stop_step(results, workdir: Path) -> int:
    """The step every process says it stopped at, after checking the one-line message."""
    steps = set()
    for code, err in results:
        assert code == 143, err[-3000:]
        assert "Traceback" not in err, err[-3000:]
        lines = [line for line in err.splitlines() if line.startswith("jaxtom: ")]
        assert len(lines) == 1, err[-3000:]
        match = STOP_LINE.fullmatch(lines[0])
        assert match, lines[0]
        assert Path(match["dir"]) == workdir.absolute() / "checkpoints"
        steps.add(int(match["step"]))
    (step,) = steps  # every process stopped at the same step
    assert 2 <= step < STEPS
    # that step's checkpoint, written whole, and no other
    assert sorted(p.name for p in (workdir / "checkpoints").iterdir()) == [str(step)]
    assert (workdir / "checkpoints" / str(step) / "_CHECKPOINT_METADATA").exists()
    return step


def assert_same_end(reference: Path, resumed: Path) -> None:
    (a, da), (b, db) = checkpoint(reference, STEPS), checkpoint(resumed, STEPS)
    assert da == db
    for k in a:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_sigterm_stops_one_process_with_a_checkpoint_and_a_rerun_ends_the_same(tmp_path):
    from jaxtom.cli import main

    stopped_dir, full = tmp_path / "stopped", tmp_path / "full"
    # this process's devices in the child too (its environment), so the runs below match
    procs = launch(TOY, stopped_dir, nproc=1, devices=len(jax.devices()))
    results = terminate_after(procs, stopped_dir)
    stop_step(results, stopped_dir)
    assert STOP_LINE.search(results[0][1])["cause"] == "SIGTERM"
    for workdir in (stopped_dir, full):  # the rerun, then an uninterrupted run, here
        assert main(["train", *TOY, f"trainer.workdir={workdir}", "--quiet"]) == 0
    assert logged_steps(stopped_dir) == STEPS  # the rerun continued from the stop's step
    assert_same_end(full, stopped_dir)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory) -> Path:
    """The run never stopped, as 2 processes x 4 devices: what a stopped run resumes to."""
    full = tmp_path_factory.mktemp("uninterrupted")
    finish(launch(TOY, full, nproc=2, devices=8))
    return full


@pytest.mark.slow  # four JAX processes start and compile, beside the reference's two
def test_sigterm_stops_two_distributed_processes_at_one_step_and_a_rerun_ends_the_same(
        tmp_path, uninterrupted):
    stopped_dir = tmp_path / "stopped"
    results = terminate_after(launch(TOY, stopped_dir, nproc=2, devices=8), stopped_dir)
    stop_step(results, stopped_dir)
    for _, err in results:
        assert "preemption sync point" in STOP_LINE.search(err)["cause"]
    finish(launch(TOY, stopped_dir, nproc=2, devices=8))
    assert_same_end(uninterrupted, stopped_dir)


@pytest.mark.slow  # four JAX processes start and compile, beside the reference's two
def test_tpu_pod_stop_on_two_localhost_workers_reports_the_step_and_a_restart_resumes(
        tmp_path, uninterrupted):
    """`launch/tpu_pod.sh` against a fake gcloud that runs each ssh command on two localhost
    "workers" (tests/test_launch.py): start, `--stop` once steps are logged, start again."""
    from tests.commands.test_multiprocess import _port
    from tests.test_launch import FAKE_GCLOUD, TPU_POD, _alive, _script

    bin_dir, worker_bin, logs = tmp_path / "bin", tmp_path / "worker_bin", tmp_path / "logs"
    bin_dir.mkdir()
    worker_bin.mkdir()
    _script(bin_dir / "gcloud", FAKE_GCLOUD)
    _script(worker_bin / "hostname", "#!/bin/sh\necho \"$FAKE_HOSTNAME\"\n")
    workdir = tmp_path / "run"
    path = os.environ["PATH"]
    env = {k: os.environ[k] for k in ("LANG", "TMPDIR", "JAX_COMPILATION_CACHE_DIR")
           if k in os.environ}
    env.update(PATH=f"{bin_dir}:{path}", FAKE_GCLOUD_LOG=str(tmp_path / "gcloud.log"),
               HOME=str(tmp_path), FAKE_WORKERS="w-0 w-1", FAKE_WORKER_PATH=f"{worker_bin}:{path}",
               REPO_DIR=str(ROOT), LOG_DIR=str(logs), PYTHON=sys.executable,
               JAX_PLATFORMS="cpu", XLA_FLAGS="--xla_force_host_platform_device_count=4",
               JAX_NUM_PROCESSES="2", JAX_CPU_COLLECTIVES_IMPLEMENTATION="gloo",
               PYTHONPATH=str(ROOT), FORWARD_ENV="JAX_COORDINATOR_ADDRESS JAX_NUM_PROCESSES "
               "JAX_CPU_COLLECTIVES_IMPLEMENTATION PYTHONPATH")

    def pod(*args, timeout=60):
        out = subprocess.run(["bash", str(TPU_POD), "pod", "zone", *args], env=env,
                             capture_output=True, text=True, timeout=timeout)
        assert out.returncode == 0, out.stdout + out.stderr
        return out.stdout

    def start() -> list[int]:
        env["JAX_COORDINATOR_ADDRESS"] = f"127.0.0.1:{_port()}"
        pod(*TOY, f"trainer.workdir={workdir}", "--quiet")
        return [int((logs / f"worker-w-{i}.pid").read_text()) for i in range(2)]

    def log(i: int) -> str:
        return (logs / f"worker-w-{i}.log").read_text()

    pids = start()
    try:
        deadline = time.time() + 600
        while logged_steps(workdir) < 2:
            assert all(map(_alive, pids)), log(0)[-3000:] + log(1)[-3000:]
            assert time.time() < deadline, "no steps logged"
            time.sleep(0.05)
        out = pod("--stop", timeout=200)
        reported = re.findall(r"(w-\d): stopped pid (\d+) \(exit 143, checkpoint at step (\d+) "
                              r"in (\S+)\)", out)
        assert sorted(r[:2] for r in reported) == [("w-0", str(pids[0])),
                                                   ("w-1", str(pids[1]))], out
        assert {r[3] for r in reported} == {str(workdir / "checkpoints")}
        (step,) = {int(r[2]) for r in reported}
        assert not any(map(_alive, pids))
        assert stop_step([(143, log(i)) for i in range(2)], workdir) == step

        pids = start()  # the same command again: it resumes and runs to the end
        deadline = time.time() + 600
        while any(map(_alive, pids)):
            assert time.time() < deadline, "the restarted run did not finish"
            time.sleep(0.1)
        assert '"step": %d' % STEPS in log(0), log(0)[-3000:]
        assert_same_end(uninterrupted, workdir)
    finally:
        for pid in pids:
            if _alive(pid):
                os.kill(pid, signal.SIGKILL)


@pytest.mark.slow  # MindZero's setup and the warm-up's compile: about a minute and a half
def test_a_stop_during_mindzero_warm_up_ends_the_command_before_ssrl(tmp_path, monkeypatch,
                                                                      capsys):
    """`jaxtom mindzero run` stopped in its first phase: the warm-up's step is saved, then the
    command prints its one line and exits 143, with no SSRL and no evaluation started."""
    from jaxtom.cli import main
    from jaxtom.rl.trainer import Trainer

    step = Trainer.train_step

    def signalled(self, state, tasks, i):  # SIGTERM while the warm-up works on its step 1
        if self.desc == "warm-up" and i == 0:
            os.kill(os.getpid(), signal.SIGTERM)
        return step(self, state, tasks, i)

    monkeypatch.setattr(Trainer, "train_step", signalled)
    # the warm-up's periodic checkpoint at its step 4 (its checkpoint_every is capped there)
    args = [a for a in MINDZERO if not a.startswith(("mesh.", "mindzero.warmup.steps=",
                                                     "trainer.checkpoint_every="))]
    args += ["mindzero.warmup.steps=4", "trainer.checkpoint_every=1000"]
    assert main(["mindzero", "run", *args, f"trainer.workdir={tmp_path}", "--quiet"]) == 143
    err = capsys.readouterr().err
    (line,) = [x for x in err.splitlines() if x.startswith("jaxtom: ")]
    match = STOP_LINE.fullmatch(line)
    assert match and match["step"] == "1", line
    assert Path(match["dir"]) == tmp_path / "warmup_train" / "checkpoints"
    assert sorted(p.name for p in (tmp_path / "warmup_train" / "checkpoints").iterdir()) == ["1"]
    # neither the warm-up's saved model (written when it finishes) nor anything after it
    assert not any((tmp_path / name).exists() for name in ("warmup", "ssrl", "checkpoint",
                                                          "results.json"))
