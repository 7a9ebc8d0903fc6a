"""Every file in `configs/` is exercised: two update steps on the one trainer, and one-line
errors for bad overrides. A new config file is picked up by the glob, so it cannot land
without this coverage.

The steps run each config's own precision, mesh shape (on 8 simulated CPU devices),
micro-/mini-batch settings, controller and reward, with a tiny random stand-in for its
checkpoint and sizes scaled down by overrides (fewer prompts and episodes, shorter caps).
Configs that run on a CPU as they are (random or bundled weights) run in the default suite;
the papers' accelerator configs (an external checkpoint, an 8-device mesh, 72-256 padded
rows per update) take minutes on 2 cores and run under `-m slow`."""

import glob
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from jaxtom import cli
from jaxtom.config import load_config

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = sorted(glob.glob(str(ROOT / "configs" / "*.py")))
NAMES = [Path(p).stem for p in CONFIGS]


def test_configs_are_found():
    assert len(CONFIGS) >= 16 and "toy_cpu" in NAMES and "mindzero_qa_tiny" in NAMES


@pytest.mark.parametrize("path", CONFIGS, ids=NAMES)
@pytest.mark.parametrize("command", ["train", "eval"])
def test_bad_overrides_are_one_line_exit_2(path, command, tmp_path, capsys):
    workdir = tmp_path / "run"
    cases = [("no_such.field=1", "no_such.field"), ("trainer.total_steps=abc",
                                                     "trainer.total_steps"),
             ("step.learning_rate=fast", "step.learning_rate"),
             ("trainer.nope=1", "trainer.nope"), ("mesh.data=two", "mesh.data")]
    for override, field in cases:
        rc = cli.main([command, path, f"trainer.workdir={workdir}", override])
        lines = capsys.readouterr().err.strip().splitlines()
        assert rc == 2, override
        assert len(lines) == 1 and lines[0].startswith(f"config error: {field}"), lines
    assert not workdir.exists()


def _overrides(path: str, standin: Path, workdir: Path) -> list[str]:
    """Scaled-down sizes; precision, mesh, micro/mini batches, controller, reward stay."""
    out = [f"trainer.workdir={workdir}", "trainer.total_steps=2",
           "trainer.checkpoint_every=2", "trainer.progress=false"]
    name = Path(path).stem
    if name == "toy_cpu":
        return out
    tiny = name in ("mindzero_gridworld_tiny", "mindzero_qa_tiny",
                    "mindzero_gridworld_qwen3vl_tiny", "mindzero_gridworld_qwen3vl_cpu",
                    "mindzero_household_tiny",
                    "mindzero_household_qa_tiny", "ctom_tiny")  # own BPE + random init
    if not tiny:  # Qwen3-VL configs (image observations) get a Qwen3-VL stand-in
        out.append(f"model.path={standin}_vl" if "qwen3vl" in name else f"model.path={standin}")
    if name.startswith("mindzero"):
        out += ["mindzero.data.train_episodes=4", "mindzero.data.eval_episodes=2",
                "mindzero.warmup.batch_size=4", "trainer.prompts_per_step=2",
                "trainer.group_size=4", "trainer.max_new_tokens=12", "trainer.eval_every=2"]
        if tiny:
            out += ["mindzero.warmup.steps=2", "mindzero.warmup.min_distinct=0", "mindzero.warmup.min_lead=0",
                    "model.vocab_size=320"]
        if name == "mindzero_gridworld_tiny":
            out.append("mindzero.data.val_episodes=2")
        if name == "mindzero_gridworld_qwen3vl_cpu":  # its reading phase, within 2 steps
            out.append("mindzero.warmup.read_steps=1")
        if name.startswith("mindzero_household") and not tiny:
            # the paper's reward model is a server; here the frozen stand-in scores (no HTTP)
            out += ["mindzero.household.scorer=reference", "mindzero.warmup.steps=2"]
        return out
    assert name.startswith("ctom"), f"{name}: a config of an unknown kind needs overrides here"
    return out + ["ctom.simulator=scripted", "ctom.num_tasks=2", "trainer.prompts_per_step=2",
                  "trainer.group_size=2", "trainer.row_len=320", "ctom.pred_row_len=256",
                  "ctom.pred_rows=4", "ctom.controller.max_rounds=1",
                  "ctom.controller.max_revisions=1", "ctom.controller.plan_cap=6",
                  "ctom.controller.ask_cap=8", "ctom.controller.draft_cap=12",
                  "ctom.controller.revision_cap=12", "ctom.controller.prediction_cap=8",
                  "ctom.controller.response_cap=12"] + (
        # the packing default: generated tasks (enough to see every cue), a 2-step warm-up
        ["ctom.num_tasks=48", "ctom.eval_tasks=4", "ctom.warmup.steps=2",
         "ctom.warmup.batch_size=2", "model.vocab_size=320"] if tiny else [])


SCRIPT = textwrap.dedent("""
    import json, sys
    import jax
    assert jax.device_count() == 8
    from jaxtom.commands.train import train
    from jaxtom.config import load_config
    from tests.commands.standin import write_standin, write_vl_standin
    write_standin(sys.argv[1])
    jobs = json.loads(sys.argv[2])
    if any(f"model.path={sys.argv[1]}_vl" in overrides for _, overrides in jobs):
        write_vl_standin(sys.argv[1] + "_vl")
    for path, overrides in jobs:
        config = load_config(path, overrides)
        summary = train(config, progress=False)
        print("RESULT", json.dumps({"config": path, **summary}), flush=True)
""")


def needs_checkpoint(path: str) -> bool:
    """A paper config: its model is an external checkpoint (not random, not bundled)."""
    from jaxtom.config import config_module
    return config_module(path).get_config().model.path not in ("", "smollm2")


def run_configs(paths: list[str], tmp_path: Path):
    standin = tmp_path / "standin"
    jobs = [(p, _overrides(p, standin, tmp_path / Path(p).stem)) for p in paths]
    env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT),
           "XLA_FLAGS": "--xla_force_host_platform_device_count=8"}
    proc = subprocess.run([sys.executable, "-c", SCRIPT, str(standin), json.dumps(jobs)],
                          env=env, cwd=ROOT, capture_output=True, text=True, timeout=3600)
    assert proc.returncode == 0, proc.stderr[-5000:]
    results = [json.loads(line.split(" ", 1)[1]) for line in proc.stdout.splitlines()
               if line.startswith("RESULT ")]
    assert [r["config"] for r in results] == paths
    for (path, overrides), r in zip(jobs, results):
        assert r["step"] == 2, r
        name = Path(path).stem
        workdir = tmp_path / name
        metrics = workdir / ("ssrl" if name.startswith("mindzero") else "") / "metrics.jsonl"
        rows = [json.loads(line) for line in metrics.read_text().splitlines()]
        assert [row["step"] for row in rows] == [1, 2], name
        for row in rows:
            assert all(v == v for v in row.values()), (name, row)  # no NaN
        assert_path_did_its_work(load_config(path, overrides), workdir, rows)


def assert_path_did_its_work(config, workdir: Path, rows: list[dict]) -> None:
    """What each kind of run must have done beyond finishing without NaN: every update read
    policy tokens with its prediction cap in (0, 1]; a MindZero run warmed up for its steps,
    saved its models and logged rewards, validity and (goal tasks) a particle entropy and
    log-likelihood in range; a CToM run with a prediction term trained it."""
    import math
    name = workdir.name
    for row in rows:
        assert row["policy_tokens"] > 0 and row["updates"] >= 1, (name, row)
        assert 0.0 < row["eta"] <= 1.0 and 0.0 <= row["clip_frac"] <= 1.0, (name, row)
        assert row["skipped"] in (0.0, 1.0), (name, row)
    if config.kind == "mindzero":
        mz = config.mindzero
        warm = workdir / "warmup_train" / "metrics.jsonl"
        if mz.warmup.steps:
            assert len(warm.read_text().splitlines()) == mz.warmup.steps, name
            assert (workdir / "warmup").is_dir(), name
        assert (workdir / "checkpoint").is_dir(), name
        for row in rows:
            assert 0.0 <= row["valid"] <= 1.0 and row["reward_std"] >= 0.0, (name, row)
            if "q_entropy" in row:  # goal particles: q over n hypotheses
                top = math.log(max(mz.data.num_particles, 1)) + 1e-5
                assert 0.0 <= row["q_entropy"] <= top and row["likelihood"] <= 1e-6, (name, row)
            if "answer_a" in row:  # QA: a share of answers
                assert 0.0 <= row["answer_a"] <= 1.0, (name, row)
    elif config.kind == "ctom" and config.step.lambda_pred > 0:
        for row in rows:
            assert row["loss_pred"] >= 0.0 and row["grad_norm_pred"] >= 0.0, (name, row)


def cpu_configs(mindzero: bool) -> list[str]:
    """The configs that run without an external checkpoint, MindZero's or the others."""
    return [p for p in CONFIGS if not needs_checkpoint(p)
            and Path(p).stem.startswith("mindzero") == mindzero]


@pytest.mark.slow  # ~10 min on 2 cores; the default suite's room went to the multi-process
# paper-config checks (tests/commands/test_paper_multiprocess.py); each CPU config's own
# end-to-end test stays in it
def test_cpu_configs_run_two_update_steps(tmp_path):
    """CToM's and the toy's (MindZero's are in test_every_mindzero_config.py, another worker)."""
    run_configs(cpu_configs(mindzero=False), tmp_path)


@pytest.mark.slow  # 7 paper configs on 8 simulated devices: ~15 min on 2 cores
def test_paper_configs_run_two_update_steps(tmp_path):
    run_configs([p for p in CONFIGS if needs_checkpoint(p)], tmp_path)
