"""Importing jaxtom does no JAX work: `jax.distributed.initialize` must run before any JAX
call that starts a backend, and `jaxtom train` imports every package before it can run."""

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

SCRIPT = textwrap.dedent("""
    import importlib, pkgutil, sys
    import jaxtom
    from jax._src import xla_bridge
    skip = ("__main__", "_sandbox_runner", "_sandbox_init")
    names = [m.name for m in pkgutil.walk_packages(jaxtom.__path__, "jaxtom.")
             if not m.name.endswith(skip)]
    for name in names:
        importlib.import_module(name)
        if xla_bridge._backends:
            sys.exit(f"importing {name} started a JAX backend")
    from jaxtom import cli
    cli.build_parser()
    if xla_bridge._backends:
        sys.exit("building the command line started a JAX backend")
    print(len(names))
""")


def test_no_module_does_jax_work_at_import():
    out = subprocess.run([sys.executable, "-c", SCRIPT], cwd=ROOT, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:] + out.stdout[-500:]
    assert int(out.stdout.split()[-1]) > 40  # every module was imported
