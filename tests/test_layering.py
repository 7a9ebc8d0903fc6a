"""Environments sit below papers: importing every module of `jaxtom.gridworld` and
`jaxtom.household` pulls in no paper package (`jaxtom.mindzero`, `jaxtom.ctom`) and not the
trainer (`jaxtom.rl`). Checked in a fresh interpreter, so other tests' imports cannot hide a
dependency."""

import json
import os
import subprocess
import sys

PROBE = """
import importlib, json, pkgutil, sys
import jaxtom.gridworld, jaxtom.household
for pkg in (jaxtom.gridworld, jaxtom.household):
    for info in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + "."):
        importlib.import_module(info.name)
print(json.dumps(sorted(m for m in sys.modules if m.split(".")[:2] in
                        (["jaxtom", "mindzero"], ["jaxtom", "ctom"], ["jaxtom", "rl"]))))
"""


def test_environments_import_no_paper_and_no_trainer():
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True,
                         check=True, env={**os.environ, "JAX_PLATFORMS": "cpu"})
    assert json.loads(out.stdout.strip().splitlines()[-1]) == []
