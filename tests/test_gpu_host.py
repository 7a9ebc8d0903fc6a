"""`launch/gpu_host.sh`: the XLA flags it sets for NVLink hosts come before the caller's
XLA_FLAGS (XLA keeps the last of a repeated flag, so the caller's win), this jaxlib knows
every one of them (an unknown flag aborts JAX at start), and `PYTHON` picks the interpreter.
The script runs against a fake interpreter that records its environment."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.launch_fakes import script

ROOT = Path(__file__).resolve().parents[1]

FAKE_PYTHON = f"""#!{sys.executable}
import json, os, sys
print(json.dumps({{"argv": sys.argv[1:], "env": dict(os.environ)}}))
"""


def _launch(tmp_path, **env) -> dict:
    python = script(tmp_path / "python-fake", FAKE_PYTHON)
    keep = {k: os.environ[k] for k in ("PATH", "LANG", "TMPDIR") if k in os.environ}
    out = subprocess.run(["bash", str(ROOT / "launch" / "gpu_host.sh"), "configs/toy_cpu.py",
                          "mesh.fsdp=-1"], env=dict(keep, PYTHON=str(python), **env),
                         capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def test_gpu_host_puts_its_flags_before_the_callers(tmp_path):
    record = _launch(tmp_path, XLA_FLAGS="--xla_gpu_enable_triton_gemm=true")
    assert record["argv"] == ["-m", "jaxtom.cli", "train", "configs/toy_cpu.py", "mesh.fsdp=-1"]
    flags = record["env"]["XLA_FLAGS"].split()
    assert "--xla_gpu_enable_latency_hiding_scheduler=true" in flags
    assert "--xla_gpu_enable_pipelined_all_gather=true" in flags
    # the caller's setting comes last, so it is the one XLA keeps
    assert flags.index("--xla_gpu_enable_triton_gemm=false") < flags.index(
        "--xla_gpu_enable_triton_gemm=true") == len(flags) - 1
    assert record["env"]["JAX_PLATFORMS"] == "cuda"
    assert record["env"]["XLA_PYTHON_CLIENT_MEM_FRACTION"] == "0.9"


def test_this_jaxlib_knows_every_flag_gpu_host_sets(tmp_path):
    flags = _launch(tmp_path)["env"]["XLA_FLAGS"]
    assert flags.split(), flags
    out = subprocess.run([sys.executable, "-c", "import jax.numpy as jnp; "
                          "print(float(jnp.ones(3).sum()))"],
                         env={**os.environ, "XLA_FLAGS": flags, "JAX_PLATFORMS": "cpu"},
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]  # "Unknown flag in XLA_FLAGS" otherwise
    assert out.stdout.strip() == "3.0"
