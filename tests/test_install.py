"""`launch/install.sh` and the extras it installs: a Python >= 3.11 environment made by `uv`
(installed by its standalone installer when missing), `.[tpu]` / `.[cuda]` that bring the gcs
packages along, constraints.txt applied, an old environment refused rather than replaced.

`uv` and `curl` are fakes on PATH that record how they were called (`tests/launch_fakes.py`
says what the fake uv makes).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.launch_fakes import FAKE_UV, script as _script

ROOT = Path(__file__).resolve().parents[1]
INSTALL = ROOT / "launch" / "install.sh"

# uv's standalone installer, as `curl ... | sh` runs it: puts uv where UV_UNMANAGED_INSTALL says
FAKE_CURL = f"""#!{sys.executable}
import json, os, sys
with open(os.environ["FAKE_LOG"], "a") as f:
    f.write(json.dumps({{"curl": sys.argv[1:]}}) + "\\n")
print('mkdir -p "$UV_UNMANAGED_INSTALL" && cp "$FAKE_UV_SOURCE" "$UV_UNMANAGED_INSTALL/uv"')
"""


@pytest.fixture
def host(tmp_path):
    """A fresh host: a HOME, a fake curl on PATH, and a fake uv (on PATH only if asked)."""
    tools = tmp_path / "tools"
    tools.mkdir()
    with_uv = tmp_path / "with_uv"
    with_uv.mkdir()
    source = _script(tools / "uv-source", FAKE_UV)
    _script(with_uv / "uv", FAKE_UV)
    _script(tools / "curl", FAKE_CURL)
    home = tmp_path / "home"
    home.mkdir()
    keep = {k: os.environ[k] for k in ("LANG", "TMPDIR", "PYTHONPATH") if k in os.environ}

    class Host:
        venv = tmp_path / "venv"
        log = tmp_path / "log.jsonl"

        def install(self, *args, uv_on_path=True, env=None):
            path = f"{tools}:{os.environ['PATH']}"
            path = f"{with_uv}:{path}" if uv_on_path else path
            full = dict(keep, PATH=path, HOME=str(home), FAKE_LOG=str(self.log),
                        FAKE_UV_SOURCE=str(source), VENV=str(self.venv), **(env or {}))
            return subprocess.run(["bash", str(INSTALL), *args], env=full, capture_output=True,
                                  text=True, timeout=120)

        def calls(self):
            return ([json.loads(x) for x in self.log.read_text().splitlines()]
                    if self.log.exists() else [])

    Host.home = home
    return Host()


def test_install_makes_a_311_environment_with_the_tpu_extra_under_the_constraints(host):
    out = host.install("tpu")
    assert out.returncode == 0, out.stderr
    venv_call, pip_call = host.calls()
    assert venv_call["argv"] == ["venv", "--python", "3.11", str(host.venv)]
    assert pip_call["argv"] == ["pip", "install", "--python", str(host.venv / "bin" / "python"),
                                "-c", "constraints.txt", "-e", ".[tpu]"]
    assert pip_call["cwd"] == str(ROOT)  # the checkout the script lives in
    assert f"{host.venv}/bin/jaxtom doctor" in out.stdout
    # the environment runs jaxtom: the command the README gives next
    help_out = subprocess.run([str(host.venv / "bin" / "jaxtom"), "doctor", "--help"],
                              capture_output=True, text=True, timeout=120,
                              env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert help_out.returncode == 0 and "--processes" in help_out.stdout

    again = host.install("tpu", "test")  # an existing 3.11 environment is reused
    assert again.returncode == 0, again.stderr
    assert [c["argv"][0] for c in host.calls()] == ["venv", "pip", "pip"]
    assert host.calls()[-1]["argv"][-1] == ".[tpu,test]"


@pytest.mark.parametrize("target, extras", [("cuda", ".[cuda]"), ("cpu", ".[gcs]")])
def test_install_targets(host, target, extras):
    out = host.install(target)
    assert out.returncode == 0, out.stderr
    assert host.calls()[-1]["argv"][-1] == extras


def test_install_fetches_uv_when_the_host_has_none(host):
    out = host.install("tpu", uv_on_path=False)
    assert out.returncode == 0, out.stderr
    curl, venv_call, pip_call = host.calls()
    assert curl["curl"] == ["-LsSf", "https://astral.sh/uv/install.sh"]
    assert (host.home / ".local" / "bin" / "uv").exists()
    assert venv_call["argv"][0] == "venv" and pip_call["argv"][:2] == ["pip", "install"]
    host.log.unlink()
    assert host.install("tpu", uv_on_path=False).returncode == 0  # found where it was put
    assert "curl" not in host.calls()[0]


def test_install_refuses_an_environment_with_an_old_python(host):
    (host.venv / "bin").mkdir(parents=True)
    _script(host.venv / "bin" / "python",
            "#!/bin/sh\n[ \"$1\" = -V ] && echo 'Python 3.10.12' && exit 0\nexit 1\n")
    out = host.install("tpu")
    assert out.returncode == 1
    assert "Python 3.10.12; expected 3.11 or newer" in out.stderr
    assert host.calls() == []  # nothing installed into it


def test_install_fails_when_the_gcs_packages_are_missing_afterwards(host):
    out = host.install("tpu", env={"FAKE_SKIP_GCS": "1"})
    assert out.returncode == 1 and "gcsfs or google-cloud-storage did not install" in out.stderr


@pytest.mark.parametrize("args, env, message", [
    ((), {}, "tpu|cuda|cpu"),
    (("rocm",), {}, "unknown target 'rocm'"),
    (("tpu", "a b"), {}, "not an extra's name"),
    (("tpu",), {"PYTHON_VERSION": "3.10"}, "expected 3.11 or newer"),
])
def test_install_refuses_bad_invocations_before_installing(host, args, env, message):
    out = host.install(*args, env=env)
    assert out.returncode == 2 and message in out.stderr
    assert host.calls() == []


def _requirement_names(reqs: list[str]) -> dict[str, str]:
    return {re.split(r"[<>=\[;! ]", r, maxsplit=1)[0].lower(): r for r in reqs}


def test_accelerator_extras_bring_the_gcs_packages():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"][
        "optional-dependencies"]
    gcs = _requirement_names(extras["gcs"])
    for name in ("tpu", "cuda"):
        reqs = _requirement_names(extras[name])
        assert {k: reqs.get(k) for k in gcs} == gcs, name  # same packages, same bounds
        assert "jax" in reqs


def test_constraints_pin_jax_and_jaxlib_together():
    pins = dict(line.split("==") for line in (ROOT / "constraints.txt").read_text().splitlines()
                if "==" in line and not line.startswith("#"))
    # jax[tpu] and jax[cuda12] require the jaxlib of their own version
    assert pins["jax"] == pins["jaxlib"]
