"""`jaxtom doctor`: every check passes on configs/toy_cpu.py and a CToM config whose simulator
answers on localhost, and each check fails, with one line naming what is wrong, on a bad
workdir (a path under a file, a gs:// path without gcsfs), a missing or truncated model, a
mesh that does not cover the devices, the wrong backend or process count, and a simulator URL
on a closed localhost port. Two processes started as the launchers start them all-gather
their ids."""

from __future__ import annotations

import http.server
import json
import os
import socket
import subprocess
import sys
import threading
from pathlib import Path
from types import SimpleNamespace

import jax
import numpy as np
import pytest

from jaxtom import preflight
from jaxtom.commands import doctor

ROOT = Path(__file__).resolve().parents[2]
TOY = str(ROOT / "configs" / "toy_cpu.py")
CTOM = str(ROOT / "configs" / "ctom_tiny.py")


@pytest.fixture(autouse=True)
def _one_process(monkeypatch):
    for name in ("JAXTOM_DISTRIBUTED", "JAX_COORDINATOR_ADDRESS", "TPU_WORKER_HOSTNAMES",
                 "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr(preflight, "accelerator_on_host", lambda: None)


def _doctor(capsys, *argv) -> tuple[int, dict[str, str]]:
    """(exit status, check name -> its line) of one `jaxtom doctor` run."""
    status = doctor.main(list(argv))
    lines = capsys.readouterr().out.strip().splitlines()
    checks = {}
    for line in lines[:-1]:
        verdict, name = line.split()[:2]
        checks[name] = line
        assert verdict in ("ok", "FAIL"), line
    assert lines[-1].startswith("doctor: "), lines
    return status, checks


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def simulator_server():
    """An OpenAI-compatible `/v1/models` on 127.0.0.1 that serves one model."""
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802
            if self.path != "/v1/models":
                self.send_error(404)
                return
            body = json.dumps({"object": "list", "data": [{"id": "served-model"}]}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


def test_every_check_passes_on_the_toy_config(capsys, tmp_path):
    status, checks = _doctor(capsys, TOY, "mesh.fsdp=-1", f"trainer.workdir={tmp_path / 'run'}")
    assert status == 0, checks
    assert list(checks) == ["config", "processes", "backend", "mesh", "workdir", "model",
                            "simulator"]
    assert all(line.startswith("ok") for line in checks.values())
    assert f"covers all {jax.device_count()} devices" in checks["mesh"]
    # the probe is gone, the directory the run will use is there
    assert [p.name for p in (tmp_path / "run").iterdir()] == []


def test_a_workdir_under_a_file_fails(capsys, tmp_path):
    (tmp_path / "file").write_text("x")
    status, checks = _doctor(capsys, TOY, "mesh.fsdp=-1",
                             f"trainer.workdir={tmp_path / 'file' / 'run'}")
    assert status == 2
    assert checks["workdir"].startswith("FAIL") and "is not writable" in checks["workdir"]
    assert all(checks[k].startswith("ok") for k in ("config", "backend", "mesh", "model"))


def test_a_bucket_workdir_without_gcsfs_names_the_pip_line(capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "gcsfs", None)  # an import of it raises ImportError
    status, checks = _doctor(capsys, TOY, "mesh.fsdp=-1", "trainer.workdir=gs://bucket/run")
    assert status == 2
    assert checks["workdir"].startswith("FAIL")
    assert "needs gcsfs" in checks["workdir"] and preflight.GCS_PIP in checks["workdir"]


def test_a_missing_model_path_is_one_config_line(capsys, tmp_path):
    status, checks = _doctor(capsys, TOY, f"model.path={tmp_path / 'nowhere'}")
    assert status == 2
    assert list(checks) == ["config"]
    assert checks["config"].startswith("FAIL") and "model.path" in checks["config"]


def test_a_model_directory_without_config_or_with_a_truncated_file_fails(capsys, tmp_path):
    from safetensors.numpy import save_file

    model = tmp_path / "model"
    model.mkdir()
    status, checks = _doctor(capsys, TOY, "mesh.fsdp=-1", f"trainer.workdir={tmp_path / 'r'}",
                             f"model.path={model}")
    assert status == 2 and "no config.json" in checks["model"]

    (model / "config.json").write_text(json.dumps({"model_type": "qwen3"}))
    save_file({"w": np.ones((64, 64), np.float32)}, str(model / "model.safetensors"))
    assert preflight.check_model(str(model)).ok, preflight.check_model(str(model))
    data = (model / "model.safetensors").read_bytes()
    (model / "model.safetensors").write_bytes(data[:len(data) // 2])  # a cut-off download
    status, checks = _doctor(capsys, TOY, "mesh.fsdp=-1", f"trainer.workdir={tmp_path / 'r'}",
                             f"model.path={model}")
    assert status == 2 and checks["model"].startswith("FAIL")
    assert "model.safetensors" in checks["model"] and "truncated" in checks["model"]


def test_a_gguf_path_is_checked_by_its_magic(tmp_path):
    good, bad = tmp_path / "m.gguf", tmp_path / "n.gguf"
    good.write_bytes(b"GGUF" + (3).to_bytes(4, "little") + b"\0" * 16)
    bad.write_bytes(b"<html>not a model</html>")
    assert preflight.check_model(str(good)).ok
    check = preflight.check_model(str(bad))
    assert not check.ok and "not a GGUF file" in check.detail


def test_a_mesh_larger_than_the_devices_fails(capsys, tmp_path):
    n = jax.device_count()
    status, checks = _doctor(capsys, TOY, f"mesh.fsdp={n + 1}", f"trainer.workdir={tmp_path}")
    assert status == 2
    assert checks["mesh"].startswith("FAIL") and f"needs {n + 1} devices" in checks["mesh"]


@pytest.mark.parametrize("sizes, ok, words", [
    ((1, -1, 1), True, "covers all 8"),
    ((2, 4, 1), True, "covers all 8"),
    ((1, 1, 1), False, "covers 1 of the 8 devices"),
    ((3, -1, 1), False, "does not divide"),
    ((2, 8, 1), False, "needs 16 devices"),
])
def test_the_mesh_must_cover_every_device(monkeypatch, sizes, ok, words):
    monkeypatch.setattr(jax, "device_count", lambda: 8)
    check = preflight.check_mesh(SimpleNamespace(data=sizes[0], fsdp=sizes[1],
                                                 tensor=sizes[2]))
    assert check.ok is ok and words in check.detail


def test_the_backend_must_be_the_hosts_accelerator(capsys, monkeypatch, tmp_path):
    status, checks = _doctor(capsys, TOY, "mesh.fsdp=-1", f"trainer.workdir={tmp_path}",
                             "--backend", "tpu")
    assert status == 2 and "expected tpu" in checks["backend"]
    # a TPU host whose JAX fell back to the CPU: the accelerator build is missing
    monkeypatch.setattr(preflight, "accelerator_on_host", lambda: "tpu")
    monkeypatch.setenv("JAX_PLATFORMS", "")
    check = preflight.check_backend()
    assert not check.ok and "launch/install.sh tpu" in check.detail
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")  # on purpose
    assert preflight.check_backend().ok


def test_the_process_count_must_be_what_was_asked(capsys, tmp_path):
    status, checks = _doctor(capsys, TOY, "mesh.fsdp=-1", f"trainer.workdir={tmp_path}",
                             "--processes", "2")
    assert status == 2 and "expected 2 (--processes)" in checks["processes"]


def test_a_failed_distributed_start_is_one_line_and_storage_is_still_checked(
        capsys, monkeypatch, tmp_path):
    from jaxtom.commands import train

    def refuse():
        raise RuntimeError("Barrier timed out: 1 of 2 processes joined")

    monkeypatch.setattr(train, "start_distributed", refuse)
    status, checks = _doctor(capsys, TOY, "mesh.fsdp=-1", f"trainer.workdir={tmp_path}")
    assert status == 2
    assert list(checks) == ["config", "processes", "workdir", "model", "simulator"]
    assert "jax.distributed.initialize failed: RuntimeError: Barrier timed out" in checks[
        "processes"]
    assert checks["workdir"].startswith("ok")


def test_an_http_simulator_on_a_closed_port_fails(capsys, tmp_path):
    url = f"http://127.0.0.1:{_closed_port()}/v1"
    status, checks = _doctor(capsys, CTOM, "mesh.fsdp=-1", f"trainer.workdir={tmp_path}",
                             "ctom.simulator=http", f"ctom.simulator_url={url}",
                             "--timeout", "2")
    assert status == 2
    assert checks["simulator"].startswith("FAIL") and f"GET {url}/models" in checks["simulator"]
    assert [k for k, v in checks.items() if v.startswith("FAIL")] == ["simulator"]


def test_an_http_simulator_that_answers_passes_and_must_serve_the_model(capsys, tmp_path,
                                                                       simulator_server):
    base = [CTOM, "mesh.fsdp=-1", f"trainer.workdir={tmp_path}", "ctom.simulator=http",
            f"ctom.simulator_url={simulator_server}"]
    status, checks = _doctor(capsys, *base, "ctom.simulator_model=served-model")
    assert status == 0, checks
    assert "served-model" in checks["simulator"]
    status, checks = _doctor(capsys, *base, "ctom.simulator_model=another-model")
    assert status == 2 and "'another-model' among them" in checks["simulator"]


def test_the_cli_registers_doctor(tmp_path):
    from jaxtom.cli import build_parser

    args = build_parser().parse_args(["doctor", TOY, "mesh.fsdp=-1", "--processes", "1"])
    assert args.func is doctor.run and args.processes == 1


def test_two_processes_started_like_the_launchers_all_gather(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for i in range(2):
        env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT),
               "XLA_FLAGS": "--xla_force_host_platform_device_count=2",
               "JAX_CPU_COLLECTIVES_IMPLEMENTATION": "gloo",
               "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}", "JAX_NUM_PROCESSES": "2",
               "JAX_PROCESS_ID": str(i)}
        procs.append(subprocess.Popen(
            [sys.executable, "-m", "jaxtom.cli", "doctor", TOY, "mesh.fsdp=-1",
             f"trainer.workdir={tmp_path / 'run'}", "--processes", "2"], env=env, cwd=ROOT,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=300) for p in procs]
    for i, (p, (out, err)) in enumerate(zip(procs, outs)):
        assert p.returncode == 0, out + err[-3000:]
        assert f"[process {i}/2] ok    processes       2 process(es), this is {i}" in out
        assert "all-gather across processes ok" in out
        assert "covers all 4 devices" in out
