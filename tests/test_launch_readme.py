"""launch/README.md's first-day sequences for one GPU host and for a TPU pod slice run as
written on this machine's CPU: each section's dry-run settings, then every step marked for it
(`<!-- gpu-step -->`, `<!-- tpu-step -->`), in one bash session in a stand-in checkout, with
`uv` faked (tests/launch_fakes.py) and, for the slice, launch/dry_run/gcloud in place of
gcloud. Where the README says to wait for a run to end (before a restart or an export), the
test waits for it. The export step runs where `jaxtom export` is registered. The two
sequences are slow (two toy runs each); the markers are checked by default."""

from __future__ import annotations

import os
import re
import subprocess
import textwrap
from pathlib import Path

import pytest

from jaxtom.cli import SUBCOMMANDS
from tests.launch_fakes import FAKE_UV, script

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "launch" / "README.md").read_text()
HAS_EXPORT = any(name == "export" for name, _, _ in SUBCOMMANDS)


def blocks(marker: str) -> list[str]:
    """The code of the indented block that follows each `<!-- marker -->` line."""
    lines = README.splitlines()
    out = []
    for i, line in enumerate(lines):
        if line.strip() != f"<!-- {marker} -->":
            continue
        code: list[str] = []
        for text in lines[i + 1:]:
            if text.startswith("<!--"):
                break
            if not text.strip():
                code.append("")
                continue
            indent = len(text) - len(text.lstrip())
            if indent >= 4:
                code.append(text)
            elif any(c.strip() for c in code):
                break  # the prose after the block
        out.append(textwrap.dedent("\n".join(code)).strip())
    return out


def test_the_readme_marks_each_sections_steps():
    for section, steps in (("gpu", 5), ("tpu", 5)):
        assert len(blocks(f"{section}-variables")) == 1
        assert len(blocks(f"{section}-dry-run")) == 1
        found = blocks(f"{section}-step")
        assert len(found) == steps and all(found), found
    assert any("doctor $ARGS" in b for b in blocks("tpu-step"))
    assert any("jaxtom.cli export" in b for b in blocks("tpu-step"))
    assert any("install.sh tpu" in line for line in README.splitlines())


@pytest.fixture
def checkout(tmp_path):
    """A stand-in checkout (the repo's launch/, configs/ and metadata) and an environment
    whose `uv` is the fake."""
    repo = tmp_path / "checkout"
    repo.mkdir()
    for name in ("launch", "configs", "constraints.txt", "pyproject.toml"):
        (repo / name).symlink_to(ROOT / name)
    tools = tmp_path / "tools"
    tools.mkdir()
    script(tools / "uv", FAKE_UV)
    home = tmp_path / "home"
    home.mkdir()
    drop = ("XLA_FLAGS", "JAXTOM_DISTRIBUTED", "JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES",
            "JAX_PROCESS_ID", "SLURM_NTASKS", "OMPI_COMM_WORLD_SIZE", "TPU_WORKER_HOSTNAMES",
            "VIRTUAL_ENV", "PYTHON", "REPO_DIR", "LOG_DIR", "JAXTOM_MODELS")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    env.update(PATH=f"{tools}:{os.environ['PATH']}", HOME=str(home), PYTHONPATH=str(ROOT),
               FAKE_LOG=str(tmp_path / "uv.jsonl"), TMPDIR=str(tmp_path))  # mktemp -d
    return repo, env


def run_sequence(checkout, setup: str, steps: list[str], wait: str, waits_before) -> str:
    """Runs `setup` and `steps` in one bash, calling `wait` before each step that
    `waits_before` names; returns stdout + stderr (asserting exit status 0)."""
    repo, env = checkout
    parts = ["set -euo pipefail", f"wait_idle() {{\n{wait}\n}}", setup,
             'echo "DRY_RUN_RUN=$RUN"']
    for step in steps:
        if waits_before(step):
            parts.append("wait_idle")
        parts.append(step)
    parts.append("wait_idle")
    out = subprocess.run(["bash", "-c", "\n".join(parts)], cwd=repo, env=env,
                         capture_output=True, text=True, timeout=900)
    text = out.stdout + out.stderr
    assert out.returncode == 0, text[-6000:]
    return text


def _steps(section: str) -> list[str]:
    found = blocks(f"{section}-step")
    return found if HAS_EXPORT else [b for b in found if " export " not in b]


def _finished_run(text: str) -> Path:
    run = Path(re.search(r"^DRY_RUN_RUN=(.*)$", text, re.M).group(1))
    assert (run / "checkpoints").is_dir() and (run / "metrics.jsonl").exists()
    if HAS_EXPORT:
        assert (Path(f"{run}-hf") / "config.json").exists()
    return run


@pytest.mark.slow  # two toy runs, each compiling its programs: 1-3 minutes on 2 cores
def test_the_gpu_host_sequence_runs_as_written_on_a_cpu(checkout):
    wait = ('  [ -f "$LOG.pid" ] || return 0\n'
            '  for _ in $(seq 600); do kill -0 "$(cat "$LOG.pid")" 2> /dev/null || return 0;'
            ' sleep 0.5; done; echo "run still going" >&2; return 1')
    text = run_sequence(checkout, blocks("gpu-dry-run")[0], _steps("gpu"), wait,
                        lambda step: "nohup" in step or " export " in step)
    assert "doctor: all 7 checks passed" in text
    run = _finished_run(text)
    # the resumed run's last line: the step the config asks for
    assert '{"step": 4, ' in (run.parent / "run.log").read_text()
    if not HAS_EXPORT:
        pytest.skip("steps 2-5 ran; step 6 needs `jaxtom export`, not registered here")


@pytest.mark.slow  # two toy runs, each compiling its programs: 1-2 minutes on 2 cores
def test_the_tpu_slice_sequence_runs_as_written_on_a_cpu(checkout):
    wait = ('  for _ in $(seq 600); do launch/tpu_pod.sh $TPU $ZONE --status | grep -q ": running"'
            ' || return 0; sleep 0.5; done; echo "run still going" >&2; return 1')
    text = run_sequence(checkout, blocks("tpu-dry-run")[0], _steps("tpu"), wait,
                        lambda step: "$ZONE $ARGS" in step or " export " in step)
    assert "doctor: all 7 checks passed" in text
    assert text.count("started pid") == 2  # the start and the resume
    run = _finished_run(text)
    (log,) = (run.parent / "logs").glob("worker-*.log")
    assert '{"step": 4, ' in log.read_text()
    if not HAS_EXPORT:
        pytest.skip("steps 2-5 ran; step 6 needs `jaxtom export`, not registered here")
