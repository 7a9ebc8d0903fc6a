"""The launchers: what `launch/tpu_pod.sh` has every TPU worker run, the triggers of
`parallel.initialize_distributed`, and `launch/gpu_smoke.py --tiny` end to end on the CPU.

tpu_pod.sh runs against a fake `gcloud` that records its arguments; the `--command` it was
given is then run by bash here as each worker's login shell would run it, with a fake
`hostname` (the worker's name) and a fake interpreter that records how it was started. With
FAKE_WORKERS set, the fake gcloud itself runs the command on those localhost "workers" at
once, as `ssh --worker=all` does (tests/commands/test_preemption.py drives real runs so).
"""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from jaxtom import parallel

ROOT = Path(__file__).resolve().parents[1]
TPU_POD = ROOT / "launch" / "tpu_pod.sh"

FAKE_GCLOUD = f"""#!{sys.executable}
import json, os, subprocess, sys
with open(os.environ["FAKE_GCLOUD_LOG"], "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
# FAKE_WORKERS="w-0 w-1": run the ssh --command on each of these workers here, all at once;
# a worker's environment is its login shell's (HOME, its PATH, its hostname) plus
# JAX_PROCESS_ID, which a TPU VM's metadata gives JAX
workers = os.environ.get("FAKE_WORKERS", "").split()
if workers:
    command = sys.argv[sys.argv.index("--command") + 1]
    keep = ("HOME", "LANG", "TMPDIR", "RECORD_DIR", "FAKE_SLEEP", "FAKE_ON_TERM")
    base = {{k: os.environ[k] for k in keep if k in os.environ}}
    procs = [subprocess.Popen(["bash", "-c", command], text=True, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE,
                              env=dict(base, PATH=os.environ["FAKE_WORKER_PATH"],
                                       FAKE_HOSTNAME=host, JAX_PROCESS_ID=str(i)))
             for i, host in enumerate(workers)]
    codes = []
    for p in procs:
        out, err = p.communicate()
        sys.stdout.write(out)
        sys.stderr.write(err)
        codes.append(p.returncode)
    sys.exit(max(codes))
"""

# the worker's interpreter: records argv, cwd, environment and session, prints to its log;
# on SIGTERM, FAKE_ON_TERM=stop does what `jaxtom train` does (a second to save, its stop
# line, exit 143) and =ignore goes on (a run stuck past --stop's wait); unset, it dies
FAKE_PYTHON = f"""#!{sys.executable}
import json, os, signal, socket, subprocess, sys, time
host = subprocess.run(["hostname"], capture_output=True, text=True).stdout.strip()
print("fake run on", host, flush=True)

def stop(signum, frame):
    time.sleep(1.0)
    print("jaxtom: stopped by SIGTERM (exit 143); checkpoint at step 7 saved to "
          "/runs/x/checkpoints; rerun the same command to resume", file=sys.stderr, flush=True)
    sys.exit(143)

on_term = os.environ.get("FAKE_ON_TERM")
if on_term:
    signal.signal(signal.SIGTERM, stop if on_term == "stop" else signal.SIG_IGN)
record = dict(argv=sys.argv[1:], cwd=os.getcwd(), env=dict(os.environ), sid=os.getsid(0),
              pgid=os.getpgid(0), pid=os.getpid())
path = os.path.join(os.environ["RECORD_DIR"], host + ".json")
with open(path + ".tmp", "w") as f:
    json.dump(record, f)
os.replace(path + ".tmp", path)
time.sleep(float(os.environ.get("FAKE_SLEEP", "0")))
"""


def _script(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


@pytest.fixture
def pod(tmp_path):
    """A fake gcloud on PATH, a fake worker (hostname, python, home) and a clean environment."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _script(bin_dir / "gcloud", FAKE_GCLOUD)
    worker_bin = tmp_path / "worker_bin"
    worker_bin.mkdir()
    _script(worker_bin / "hostname", "#!/bin/sh\necho \"$FAKE_HOSTNAME\"\n")
    python = _script(worker_bin / "python-fake", FAKE_PYTHON)
    home = tmp_path / "home"
    (home / "jaxtom").mkdir(parents=True)
    records = tmp_path / "records"
    records.mkdir()
    keep = {k: os.environ[k] for k in ("PATH", "LANG", "TMPDIR") if k in os.environ}
    env = dict(keep, PATH=f"{bin_dir}:{os.environ['PATH']}",
               FAKE_GCLOUD_LOG=str(tmp_path / "gcloud.log"), HOME=str(home),
               PYTHON=str(python), RECORD_DIR=str(records),
               FAKE_WORKER_PATH=f"{worker_bin}:{os.environ['PATH']}")

    class Pod:
        def __init__(self):
            self.tmp, self.env, self.home, self.records = tmp_path, env, home, records
            self.worker_bin = worker_bin

        def launch(self, *args, extra_env=None, check=True, timeout=30):
            out = subprocess.run(["bash", str(TPU_POD), *args], env=dict(env, **(extra_env or {})),
                                 capture_output=True, text=True, timeout=timeout)
            if check:
                assert out.returncode == 0, out.stderr
            return out

        def calls(self):
            log = tmp_path / "gcloud.log"
            return [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []

        def on_worker(self, command: str, host: str, sleep: float = 0.0):
            """Runs one ssh --command as worker `host`'s login shell would."""
            wenv = dict(HOME=str(home), PATH=f"{worker_bin}:{os.environ['PATH']}",
                        FAKE_HOSTNAME=host, RECORD_DIR=str(records), FAKE_SLEEP=str(sleep))
            return subprocess.run(["bash", "-c", command], env=wenv, capture_output=True,
                                  text=True, timeout=30)

        def record(self, host: str, timeout: float = 20.0) -> dict:
            path = records / f"{host}.json"
            deadline = time.monotonic() + timeout
            while not path.exists():
                assert time.monotonic() < deadline, f"worker {host} never started its run"
                time.sleep(0.05)
            return json.loads(path.read_text())

    return Pod()


def _ssh_command(call: list[str]) -> str:
    assert call[:4] == ["compute", "tpus", "tpu-vm", "ssh"], call
    assert "--worker=all" in call, call
    return call[call.index("--command") + 1]


def test_tpu_pod_runs_detached_on_every_worker_with_its_log_and_environment(pod):
    out = pod.launch("my-v5p-64", "us-east5-a", "configs/mindzero_gridworld_qwen3_4b.py",
                     "mesh.fsdp=-1", "trainer.workdir=gs://bucket/run 1",
                     extra_env={"JAXTOM_MODELS": "/mnt/models dir", "XLA_FLAGS": "--xla_a=1",
                                "LIBTPU_INIT_ARGS": "--tpu_b=2", "MY_FLAG": "x y",
                                "FORWARD_ENV": "MY_FLAG",
                                "CTOM_SIMULATOR_URL": "http://sim-host:8000/v1"})
    assert "note" not in out.stderr  # a gs:// workdir was given
    (call,) = pod.calls()
    assert call[4:7] == ["my-v5p-64", "--zone", "us-east5-a"]
    command = _ssh_command(call)
    hosts = ["t1v-n-1-w-0", "t1v-n-1-w-1"]
    started = time.monotonic()
    for host in hosts:
        # detached: the ssh command returns while the run is still going (it sleeps 3 s)
        done = pod.on_worker(command, host, sleep=3.0)
        assert done.returncode == 0, done.stderr
        assert f"{host}: started pid" in done.stdout
    assert time.monotonic() - started < 3.0
    for host in hosts:
        rec = pod.record(host)
        assert rec["argv"] == ["-m", "jaxtom.cli", "train",
                               "configs/mindzero_gridworld_qwen3_4b.py", "mesh.fsdp=-1",
                               "trainer.workdir=gs://bucket/run 1"]
        assert rec["cwd"] == str(pod.home / "jaxtom")  # REPO_DIR's default, $HOME/jaxtom
        env = rec["env"]
        assert env["JAXTOM_DISTRIBUTED"] == "1" and env["JAX_PLATFORMS"] == "tpu"
        assert env["JAXTOM_MODELS"] == "/mnt/models dir"
        assert env["XLA_FLAGS"] == "--xla_a=1" and env["LIBTPU_INIT_ARGS"] == "--tpu_b=2"
        assert env["MY_FLAG"] == "x y"
        assert env["CTOM_SIMULATOR_URL"] == "http://sim-host:8000/v1"
        # its own session (setsid), so the ssh session's end does not reach it
        assert rec["sid"] == rec["pid"] and rec["sid"] != os.getsid(0)
        logs = pod.home / "jaxtom-logs"
        assert f"fake run on {host}" in (logs / f"worker-{host}.log").read_text()
        assert (logs / f"worker-{host}.pid").read_text().strip() == str(rec["pid"])


def test_tpu_pod_logs_status_and_stop_reach_the_detached_run(pod):
    pod.launch("pod", "zone", "configs/toy_cpu.py", extra_env={"REPO_DIR": "$HOME/jaxtom",
                                                               "LOG_DIR": "$HOME/logs"})
    out = pod.launch("pod", "zone", "configs/toy_cpu.py")  # no shared workdir: a note
    assert "note" in out.stderr and "trainer.workdir" in out.stderr
    start = _ssh_command(pod.calls()[0])
    assert pod.on_worker(start, "w-0", sleep=60).returncode == 0
    pid = pod.record("w-0")["pid"]
    try:
        # a second start on a worker whose run is going is refused
        again = pod.on_worker(start, "w-0")
        assert again.returncode == 1 and "already going" in again.stderr
        for flag in ("--status", "--logs", "--stop"):
            pod.launch("pod", "zone", flag, extra_env={"LOG_DIR": "$HOME/logs"})
        status, logs, stop = (_ssh_command(c) for c in pod.calls()[-3:])
        assert "w-0: running" in pod.on_worker(status, "w-0").stdout
        assert "fake run on w-0" in pod.on_worker(logs, "w-0").stdout
        assert "w-0: stopped" in pod.on_worker(stop, "w-0").stdout
        deadline = time.monotonic() + 10
        while _alive(pid):
            assert time.monotonic() < deadline, "--stop left the run going"
            time.sleep(0.05)
    finally:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


LOCAL_WORKERS = ("w-0", "w-1")


def _start_local(pod, on_term: str) -> dict[str, int]:
    """tpu_pod.sh starts the fake run on two localhost workers; {worker: pid}."""
    out = pod.launch("pod", "zone", "configs/toy_cpu.py", "trainer.workdir=/runs/x",
                     extra_env={"FAKE_WORKERS": " ".join(LOCAL_WORKERS), "FAKE_SLEEP": "60",
                                "FAKE_ON_TERM": on_term})
    pids = {host: pod.record(host)["pid"] for host in LOCAL_WORKERS}
    for host in LOCAL_WORKERS:
        assert f"{host}: started pid {pids[host]}" in out.stdout
    return pids


def test_tpu_pod_stop_waits_for_each_workers_run_to_save_and_reports_it(pod):
    pids = _start_local(pod, "stop")
    try:
        # each run takes a second to "save" after SIGTERM: --stop reports only once it exited
        out = pod.launch("pod", "zone", "--stop",
                         extra_env={"FAKE_WORKERS": " ".join(LOCAL_WORKERS)})
        for host in LOCAL_WORKERS:
            assert (f"{host}: stopped pid {pids[host]} (exit 143, checkpoint at step 7 in "
                    f"/runs/x/checkpoints)") in out.stdout, out.stdout
            assert not _alive(pids[host])
        again = pod.launch("pod", "zone", "--stop",
                           extra_env={"FAKE_WORKERS": " ".join(LOCAL_WORKERS)})
        assert all(f"{h}: not running" in again.stdout for h in LOCAL_WORKERS)
    finally:
        _kill(pids.values())


def test_tpu_pod_stop_gives_up_after_stop_timeout_and_kill_ends_the_run(pod):
    pids = _start_local(pod, "ignore")
    workers = {"FAKE_WORKERS": " ".join(LOCAL_WORKERS)}
    try:
        out = pod.launch("pod", "zone", "--stop", check=False,
                         extra_env=dict(workers, STOP_TIMEOUT="1"))
        assert out.returncode != 0
        for host in LOCAL_WORKERS:
            assert f"{host}: pid {pids[host]} still running 1 s after SIGTERM" in out.stdout
            assert _alive(pids[host])
        assert "--kill" in out.stdout
        status = pod.launch("pod", "zone", "--status", extra_env=workers)
        assert all(f"{h}: running (pid {pids[h]})" in status.stdout for h in LOCAL_WORKERS)
        killed = pod.launch("pod", "zone", "--kill", extra_env=workers)
        for host in LOCAL_WORKERS:
            assert f"{host}: killed pid {pids[host]}" in killed.stdout
        deadline = time.monotonic() + 10
        while any(_alive(p) for p in pids.values()):
            assert time.monotonic() < deadline, "--kill left a run going"
            time.sleep(0.05)
    finally:
        _kill(pids.values())


def _kill(pids) -> None:
    for pid in pids:
        if _alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_tpu_pod_notes_the_ctom_simulator_url_each_worker_would_use(pod):
    out = pod.launch("pod", "zone", "configs/ctom_math_qwen3_8b.py", "trainer.workdir=gs://b/r")
    assert "CTOM_SIMULATOR_URL" in out.stderr and "127.0.0.1:8000" in out.stderr
    for given in ({"CTOM_SIMULATOR_URL": "http://sim:8000/v1"}, {}):
        args = [] if given else ["ctom.simulator_url=http://sim:8000/v1"]
        out = pod.launch("pod", "zone", "configs/ctom_math_qwen3_8b.py",
                         "trainer.workdir=gs://b/r", *args, extra_env=given)
        assert "note" not in out.stderr


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (exited, not yet reaped by its parent) counts as gone
    stat_file = Path(f"/proc/{pid}/stat")
    return not (stat_file.exists() and stat_file.read_text().split(")")[-1].split()[0] == "Z")


@pytest.mark.parametrize("args, env, message", [
    (("pod", "zone"), {}, "NAME ZONE CONFIG"),
    (("pod", "zone", "--bogus"), {}, "unknown option"),
    (("pod", "zone", "c.py"), {"FORWARD_ENV": "NOT_SET_ANYWHERE"}, "not set in this shell"),
    (("pod", "zone", "c.py"), {"REPO_DIR": "/a b"}, "REPO_DIR"),
    (("pod", "zone", "--logs", "many"), {}, "line count"),
    (("pod", "zone", "--stop"), {"STOP_TIMEOUT": "2m"}, "STOP_TIMEOUT"),
])
def test_tpu_pod_refuses_bad_invocations_before_calling_gcloud(pod, args, env, message):
    out = pod.launch(*args, extra_env=env, check=False)
    assert out.returncode == 2 and message in out.stderr
    assert pod.calls() == []


# ---- parallel.initialize_distributed ----------------------------------------------------
_TRIGGER_VARS = ("JAXTOM_DISTRIBUTED", "JAX_COORDINATOR_ADDRESS", "TPU_WORKER_HOSTNAMES",
                 "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "JAX_PLATFORMS")


@pytest.fixture
def init_calls(monkeypatch):
    import jax

    for name in _TRIGGER_VARS:
        monkeypatch.delenv(name, raising=False)
    calls = []
    monkeypatch.setattr(jax.distributed, "initialize", lambda **kw: calls.append(kw))
    monkeypatch.setattr(parallel, "on_tpu_vm", lambda: False)
    return calls


NO_ARGS = dict(coordinator_address=None, num_processes=None, process_id=None)


@pytest.mark.parametrize("env, tpu_vm, started", [
    ({}, False, False),                                     # one host, nothing set
    ({"JAXTOM_DISTRIBUTED": "1"}, False, True),             # tpu_pod.sh's opt-in
    ({}, True, True),                                       # a Cloud TPU VM, detected
    ({"JAXTOM_DISTRIBUTED": "0"}, True, False),             # opt-out wins over detection
    ({"JAXTOM_DISTRIBUTED": "0", "SLURM_NTASKS": "4"}, False, False),
    ({"TPU_WORKER_HOSTNAMES": "a,b"}, False, True),         # GKE
    ({"SLURM_NTASKS": "4"}, False, True),
    ({"SLURM_NTASKS": "1"}, False, False),                  # a one-task SLURM job
    ({"SLURM_NTASKS": "1", "JAXTOM_DISTRIBUTED": "1"}, False, True),
    ({"OMPI_COMM_WORLD_SIZE": "2"}, False, True),
    ({"JAX_COORDINATOR_ADDRESS": "h:1"}, False, True),
])
def test_initialize_distributed_triggers(init_calls, monkeypatch, env, tpu_vm, started):
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setattr(parallel, "on_tpu_vm", lambda: tpu_vm)
    assert parallel.initialize_distributed() is started
    # JAX detects every argument itself (TPU metadata, SLURM, MPI)
    assert init_calls == ([NO_ARGS] if started else [])


def test_initialize_distributed_passes_explicit_arguments(init_calls):
    assert parallel.initialize_distributed("host0:1234", 4, 2) is True
    assert init_calls == [dict(coordinator_address="host0:1234", num_processes=4, process_id=2)]


def test_initialize_distributed_rejects_an_unknown_switch(init_calls, monkeypatch):
    monkeypatch.setenv("JAXTOM_DISTRIBUTED", "yes")
    with pytest.raises(ValueError, match="JAXTOM_DISTRIBUTED='yes'"):
        parallel.initialize_distributed()
    assert init_calls == []


def test_on_tpu_vm_follows_jax_and_jax_platforms(monkeypatch):
    from jax._src import cloud_tpu_init

    monkeypatch.setattr(cloud_tpu_init, "running_in_cloud_tpu_vm", True)
    monkeypatch.delenv("JAX_PLATFORMS", raising=False)
    assert parallel.on_tpu_vm() is True
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")  # e.g. CPU tests on a TPU VM
    assert parallel.on_tpu_vm() is False
    monkeypatch.setenv("JAX_PLATFORMS", "tpu,cpu")
    assert parallel.on_tpu_vm() is True
    monkeypatch.setattr(cloud_tpu_init, "running_in_cloud_tpu_vm", False)
    assert parallel.on_tpu_vm() is False


# ---- launch/gpu_smoke.py ------------------------------------------------------------------
def _smoke_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("gpu_smoke", ROOT / "launch" / "gpu_smoke.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def smoke(monkeypatch):
    monkeypatch.setenv("JAXTOM_MODELS", str(ROOT / "launch" / "models"))
    return _smoke_module()


def test_gpu_smoke_divides_the_paper_configs_rows_on_one_device(smoke):
    overrides = smoke.smoke_overrides(smoke.DEFAULT_CONFIG, [], tiny=False, divisor=8)
    assert overrides[-5:] == ["mesh.data=1", "mesh.fsdp=1", "mesh.tensor=1",
                              "trainer.prompts_per_step=4", "trainer.rollout_rows=16"]
    config = smoke.load(smoke.DEFAULT_CONFIG, overrides)
    assert config.model.path.endswith("launch/models/Qwen3-4B")  # the shipped config.json
    with pytest.raises(smoke.SmokeError, match="prompts_per_step=32 does not divide by"):
        smoke.smoke_overrides(smoke.DEFAULT_CONFIG, [], tiny=False, divisor=3)


def test_gpu_smoke_batch_is_the_program_the_plan_compiles(smoke):
    from jaxtom import plan_shapes
    from jaxtom.rl.step import Learner, score_widths

    overrides = smoke.smoke_overrides(smoke.DEFAULT_CONFIG, [], tiny=True, divisor=8)
    config = smoke.load(smoke.DEFAULT_CONFIG, overrides)
    mcfg = plan_shapes.model_config(config.model)
    _, abstract = plan_shapes.abstract_model(config, mcfg)
    learner = Learner(abstract, config.step, total_steps=config.trainer.total_steps)
    rows = plan_shapes.rollout_rows(config)
    batch = smoke.random_batch(config, mcfg, learner, rows, seed=0)
    want = plan_shapes.abstract_batch(config, mcfg, rows, plan_shapes.padded_rows(1, learner))
    import jax
    assert (jax.tree.map(lambda x: (x.shape, x.dtype), batch)
            == jax.tree.map(lambda x: (x.shape, x.dtype), want))
    # every position scored: the plan's full width, not a narrower program
    assert score_widths(batch) == (config.trainer.row_len, 0)


def test_gpu_smoke_sets_measured_peaks_beside_the_plan(smoke):
    gib = 1024 ** 3
    measured = {"rollout": {"padded_rows": 16, "prompt_slots": 1792, "cache_len": 2048},
                "update": {"padded_rows": 128, "row_len": 2048,
                           "xla_memory_on_device": {"peak": 90 * gib}},
                "memory": {"after_init": {"peak_bytes_in_use": 60 * gib},
                           "after_rollout": {"peak_bytes_in_use": 70 * gib},
                           "after_update": {"peak_bytes_in_use": 99 * gib}}}
    predicted = {"update_rows": 128, "update_row_len": 2048, "rollout_rows": 16,
                 "rollout_prompt_len": 1792, "rollout_cache_len": 2048,
                 "update_peak_bytes": 100 * gib, "per_device_peak_bytes": 100 * gib,
                 "rollout_peak_with_train_state_bytes": 80 * gib}
    out = smoke.compare(measured, predicted)
    assert out["shapes_match"] is True
    assert out["rollout"]["measured_over_plan"] == pytest.approx(70 / 80)
    assert out["update"]["measured_over_plan"] == pytest.approx(0.99)
    assert out["update_xla_on_device_over_plan"] == pytest.approx(0.9)
    measured["rollout"]["cache_len"] = 4096
    assert smoke.compare(measured, predicted)["shapes_match"] is False
    measured["memory"] = {k: None for k in measured["memory"]}  # CPU: no allocator stats
    assert "update" not in smoke.compare(measured, predicted)
    assert smoke.compare(measured, {"error": "plan failed"}) == {}


def test_gpu_smoke_reports_a_failure_with_what_it_measured(smoke, monkeypatch, capsys):
    monkeypatch.setenv("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.95")

    def out_of_memory(config_path, overrides, args, out):
        out["model"] = {"params": 1}
        raise RuntimeError("RESOURCE_EXHAUSTED: Out of memory allocating 1 bytes")

    monkeypatch.setattr(smoke, "run", out_of_memory)
    assert smoke.main(["--tiny", "--no-plan"]) == 1
    lines = capsys.readouterr().out.strip().splitlines()
    result = json.loads(lines[-1])
    assert result["error"].startswith("RuntimeError: RESOURCE_EXHAUSTED")
    assert result["model"] == {"params": 1} and result["versions"]["backend"]
    assert any(line.startswith("FAILED: RuntimeError") for line in lines)


def test_gpu_smoke_meshes_fsdp_over_every_device(smoke):
    overrides = smoke.smoke_overrides(smoke.DEFAULT_CONFIG, [], tiny=False, divisor=1,
                                      devices=8)
    config = smoke.load(smoke.DEFAULT_CONFIG, overrides)
    assert (config.mesh.data, config.mesh.fsdp, config.mesh.tensor) == (1, 8, 1)
    assert config.trainer.prompts_per_step == 32 and config.trainer.rollout_rows == 128
    # the paper config's row counts (32 prompts, 128 rows per sampler call) halve 5 times
    assert smoke.candidate_divisors(config.trainer) == [1, 2, 4, 8, 16, 32]


def test_gpu_smoke_reports_the_device_with_the_largest_peak(smoke):
    from types import SimpleNamespace

    def device(peak):
        stats = {"peak_bytes_in_use": peak, "bytes_in_use": peak // 2, "bytes_limit": 100}
        return SimpleNamespace(memory_stats=lambda: stats)

    out = smoke.memory([device(5), device(9), device(7)])
    assert out == {"peak_bytes_in_use": 9, "bytes_in_use": 4, "bytes_limit": 100,
                   "device": 1, "per_device_peak_bytes": [5, 9, 7]}
    assert smoke.memory([SimpleNamespace(memory_stats=lambda: None)]) is None  # CPU


def _fake_plan(peak_gib: float, train_state_gib: float = 10.0, kept_gib: float = 0.0):
    gib = 2 ** 30
    return {"per_device_peak_bytes": peak_gib * gib,
            "update": {"memory": {"train_state": train_state_gib * gib},
                       "kept_start_model": kept_gib * gib}}


def test_gpu_smoke_picks_the_largest_rows_whose_plan_fits_the_chip(smoke):
    from jaxtom.plan import ACCELERATORS

    h100 = ACCELERATORS["H100-80GB"]
    peaks = {1: 120.0, 2: 90.0, 4: 66.0, 8: 40.0}  # GiB per device; the budget is 67.05 GiB
    asked = []

    def plan_for(d):
        asked.append(d)
        return _fake_plan(peaks[d])

    divisor, plan = smoke.choose_size([1, 2, 4, 8], plan_for, h100, 0.9)
    assert divisor == 4 and asked == [1, 2, 4]  # stops at the first that fits
    assert plan["per_device_peak_bytes"] <= 0.9 * h100
    with pytest.raises(smoke.SmokeError, match=r"no size fits .*rows / 1: 120.00 GiB"):
        smoke.choose_size([1, 2], plan_for, h100, 0.9)
    # a train state (with MindZero's kept starting model) over the budget: no rows help
    asked.clear()
    with pytest.raises(smoke.SmokeError, match="the train state alone is 75.00 GiB"):
        smoke.choose_size([1, 2, 4], lambda d: asked.append(d) or _fake_plan(100, 60, 15),
                          h100, 0.9)
    assert asked == [1]
    with pytest.raises(smoke.SmokeError, match="jaxtom plan for rows / 1 failed: boom"):
        smoke.choose_size([1], lambda d: {"error": "boom"}, h100, 0.9)


def test_gpu_smoke_sizes_by_the_plan_unless_told_and_allocates_on_demand(smoke, monkeypatch,
                                                                         capsys):
    monkeypatch.delenv("XLA_PYTHON_CLIENT_PREALLOCATE", raising=False)
    assert smoke.main(["--no-plan"]) == 2  # no divisor and no plan: nothing picks the size
    assert "need --rows-divisor" in capsys.readouterr().err
    assert os.environ["XLA_PYTHON_CLIENT_PREALLOCATE"] == "false"
    assert smoke.main(["--chip", "A100", "--rows-divisor", "8", "--no-plan"]) == 2
    assert "expected one of" in capsys.readouterr().err


@pytest.mark.slow
def test_gpu_smoke_default_on_eight_h100s_fits_by_the_plan(smoke):
    """The real plan (on 8 simulated CPU devices) of the size the smoke check picks for an
    8-GPU H100 host."""
    from types import SimpleNamespace

    from jaxtom.plan import ACCELERATORS

    args = SimpleNamespace(config=smoke.DEFAULT_CONFIG, overrides=[], tiny=False,
                           plan_timeout=900)
    trainer = smoke.load(smoke.DEFAULT_CONFIG, []).trainer
    divisor, plan = smoke.choose_size(smoke.candidate_divisors(trainer),
                                      lambda d: smoke.plan_for(args, d, 8),
                                      ACCELERATORS["H100-80GB"], 0.9)
    assert plan["mesh"] == {"data": 1, "fsdp": 8, "tensor": 1, "devices": 8, "processes": 1}
    assert plan["per_device_peak_bytes"] <= 0.9 * 80e9
    assert divisor == 1  # the paper's own rows fit 8 H100s


@pytest.mark.slow
def test_gpu_smoke_tiny_runs_end_to_end_on_cpu_beside_jaxtom_plan(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "JAXTOM_MODELS"}
    env.update(JAX_PLATFORMS="cpu", PYTHONPATH=str(ROOT))
    out = subprocess.run([sys.executable, str(ROOT / "launch" / "gpu_smoke.py"), "--tiny"],
                         env=env, capture_output=True, text=True, timeout=900, cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    result = json.loads(out.stdout.strip().splitlines()[-1])
    r, u = result["rollout"], result["update"]
    assert r["rows"] == 16 and r["new_tokens"] == 16 * 16  # every row decodes max_new_tokens
    assert u["rows"] == 128 and u["optimizer_updates"] == 4 and u["metrics_finite"]
    assert u["seconds"] > 0 and u["mfu"] > 0 and r["tokens_per_s"] > 0
    assert "error" not in result["plan"], result["plan"]
    assert result["versus_plan"]["shapes_match"], result["versus_plan"]
    # the device compiler and the plan compile the same update program (both XLA:CPU here)
    assert result["versus_plan"]["update_xla_on_device_over_plan"] == pytest.approx(1, rel=0.05)
    assert result["memory"]["after_update"] is None  # the CPU keeps no allocator statistics
    assert result["versions"]["backend"] == "cpu" and result["versions"]["jax"]
