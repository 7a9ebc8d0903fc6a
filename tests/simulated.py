"""Running a test script in a fresh Python with N simulated CPU devices (XLA_FLAGS must be set
before JAX starts, so multi-device tests run their body in a subprocess)."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# the first lines of every multi-process script (argv: nproc, pid, port, out.npy)
MULTIHOST_PREAMBLE = """
import sys
import jax, numpy as np
jax.config.update("jax_cpu_collectives_implementation", "gloo")
jax.config.update("jax_default_matmul_precision", "highest")
nproc, pid, port, out = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3], sys.argv[4]
if nproc > 1:
    jax.distributed.initialize(f"127.0.0.1:{port}", num_processes=nproc, process_id=pid)
"""


def run_on_devices(script: str, devices: int, timeout: int = 900) -> dict:
    """Runs `script` with `devices` CPU devices; returns the JSON it printed after `RESULT `."""
    env = {**os.environ, "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices}",
           "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT)}
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=timeout, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = next(l for l in proc.stdout.splitlines() if l.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])
