"""`jaxtom export RUN_DIR OUT`: a run's trainer checkpoint as a Hugging Face directory that
transformers loads, with the logits of the model the run restores. The run directory is
made as `jaxtom train` makes it (its recorded config.json, a Checkpointer step of a moved
train state), without sampling, so the test stays fast; tests/commands/test_multiprocess.py
exports a real two-process run."""

import json
from pathlib import Path

import jax
import numpy as np
import pytest

from jaxtom import cli
from tests.models.test_export_sharded import random_hf_checkpoint

ROOT = Path(__file__).resolve().parents[2]
TOY = str(ROOT / "configs" / "toy_cpu.py")
PROMPT = [[1, 5, 7, 3, 9, 2, 11]]


def make_run(workdir: Path, overrides=(), steps=(1, 2)) -> dict[int, float]:
    """A toy run directory with trainer checkpoints at `steps`, each step's params moved by
    a different amount; returns {step: shift}."""
    from jaxtom.commands.train import build_model, make_mesh, record_config
    from jaxtom.config import load_config
    from jaxtom.rl.checkpoint import Checkpointer
    from jaxtom.rl.step import Learner

    config = load_config(TOY, [f"trainer.workdir={workdir}", *overrides])
    record_config(config)
    mesh = make_mesh(config)
    model = build_model(config, mesh)
    learner = Learner(model, config.step, mesh=mesh, total_steps=config.trainer.total_steps)
    state = learner.init_state(model, seed=config.trainer.seed)
    ckpt = Checkpointer(workdir / "checkpoints", keep=5)
    shifts = {}
    for step in steps:
        shifts[step] = 0.05 * step
        moved = state.replace(step=state.step + step, params=jax.tree.map(
            lambda x, s=shifts[step]: x + s * np.sign(np.asarray(x) + 1e-3), state.params))
        ckpt.save(step, moved)
    ckpt.close()
    return shifts


def transformers_logits(path: Path) -> np.ndarray:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=torch.float32).eval()
    with torch.no_grad():
        return model(torch.tensor(PROMPT)).logits.numpy()


def jaxtom_logits(run: Path, step=None) -> np.ndarray:
    from jaxtom import parallel
    from jaxtom.commands.export import run_config, trained_model

    model, _ = trained_model(run_config(run), step, parallel.make_mesh(1, -1, 1))
    return np.asarray(model(jax.numpy.asarray(PROMPT)))


@pytest.mark.parametrize("variant", ["random", "lora_on_checkpoint"])
def test_export_loads_in_transformers_with_the_runs_logits(variant, tmp_path, capsys):
    overrides = []
    if variant == "lora_on_checkpoint":
        base = random_hf_checkpoint(tmp_path / "base")
        (base / "tokenizer.json").write_text('{"stand-in": "copied as is"}')
        overrides = [f"model.path={base}", "model.lora_rank=4", "step.lora=true"]
    run = tmp_path / "run"
    make_run(run, overrides)
    assert cli.main(["export", str(run), str(tmp_path / "out")]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["source"] == f"{run / 'checkpoints'}/2"
    got = transformers_logits(tmp_path / "out")
    want = jaxtom_logits(run)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)

    # the export holds the checkpoint's weights, not the model the run started from
    assert cli.main(["export", str(run), str(tmp_path / "out1"), "--step", "1"]) == 0
    first = transformers_logits(tmp_path / "out1")
    np.testing.assert_allclose(first, jaxtom_logits(run, step=1), rtol=1e-4, atol=1e-4)
    assert np.abs(first - got).max() > 1e-2
    if variant == "lora_on_checkpoint":
        assert summary["tokenizer"] == ["tokenizer.json"]
        assert (tmp_path / "out" / "tokenizer.json").read_text() == \
            (tmp_path / "base" / "tokenizer.json").read_text()
        # LoRA is merged: transformers sees plain Qwen3 tensors
        assert "lora" not in (tmp_path / "out" / "model.safetensors").read_bytes()[:4096]\
            .decode("latin-1")


def test_export_of_a_step_the_run_does_not_have_names_the_steps(tmp_path, capsys):
    run = tmp_path / "run"
    make_run(run, steps=(3,))
    assert cli.main(["export", str(run), str(tmp_path / "out"), "--step", "7"]) == 2
    line = capsys.readouterr().err.strip()
    assert line == (f"error: {run / 'checkpoints'}: no checkpoint of step 7; expected one of "
                    "[3]")


def _launch_export(run: Path, out: Path, nproc: int, devices: int):
    """`jaxtom export` as `nproc` processes of `devices // nproc` CPU devices, started as
    the launchers start multi-process runs."""
    import os
    import subprocess
    import sys

    from tests.commands.test_multiprocess import _port

    port, procs = _port(), []
    for i in range(nproc):
        env = {**os.environ, "JAX_PLATFORMS": "cpu", "PYTHONPATH": str(ROOT),
               "XLA_FLAGS": f"--xla_force_host_platform_device_count={devices // nproc}",
               "JAX_CPU_COLLECTIVES_IMPLEMENTATION": "gloo",
               "JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}",
               "JAX_NUM_PROCESSES": str(nproc), "JAX_PROCESS_ID": str(i)}
        procs.append(subprocess.Popen([sys.executable, "-m", "jaxtom.cli", "export", str(run),
                                       str(out)], env=env, cwd=ROOT, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True))
    return procs


@pytest.mark.slow  # three JAX processes training or exporting: a few minutes on 2 cores
def test_export_of_a_two_process_run(tmp_path):
    """A tiny `jaxtom train` as 2 processes x 2 devices, exported by one process on one
    device (orbax reshards) and by the same 2 x 2 launch (process 0 gathers and writes):
    both write the same tensors, which transformers loads with the restored model's logits."""
    from jaxtom.models.hf_io import open_hf_dir
    from tests.commands.test_multiprocess import TOY as TOY_ARGS, finish, launch

    run = tmp_path / "run"
    finish(launch(TOY_ARGS, run, nproc=2))
    assert cli.main(["export", str(run), str(tmp_path / "one")]) == 0
    finish(_launch_export(run, tmp_path / "two", nproc=2, devices=4))
    a, b = open_hf_dir(tmp_path / "one"), open_hf_dir(tmp_path / "two")
    assert a.names == b.names
    for name in a.names:
        np.testing.assert_array_equal(np.asarray(a.read(name)), np.asarray(b.read(name)), name)
    np.testing.assert_allclose(transformers_logits(tmp_path / "one"), jaxtom_logits(run),
                               rtol=1e-4, atol=1e-4)


def test_export_of_a_mindzero_run_writes_its_kept_model_and_tokenizer(tmp_path, capsys):
    """A MindZero run directory as the driver leaves it (config.json, the run's own BPE in
    tokenizer.json, the kept model in RUN_DIR/checkpoint), made without training."""
    from jaxtom.commands.train import record_config
    from jaxtom.config import load_config
    from jaxtom.models.orbax_io import save_model
    from jaxtom.mindzero.policy import train_bpe
    from jaxtom.mindzero.goals_text import build_model
    from flax import nnx

    run = tmp_path / "run"
    # qk_norm: a Qwen3-shaped decoder without it has no transformers architecture
    config = load_config(str(ROOT / "configs" / "mindzero_gridworld_tiny.py"),
                         [f"trainer.workdir={run}", "model.qk_norm=True"])
    record_config(config)
    train_bpe(["the red wall is east of the blue key"] * 4, 300, path=run / "tokenizer.json")
    model, _ = build_model(config, run, tokenizer_path=run / "tokenizer.json")
    graphdef, state = nnx.split(model)
    moved = jax.tree.map(lambda x: x + 0.05, state)
    save_model(nnx.merge(graphdef, moved), run / "checkpoint")

    assert cli.main(["export", str(run), str(tmp_path / "out")]) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["source"] == str(run / "checkpoint") and summary["kind"] == "mindzero"
    assert (tmp_path / "out" / "tokenizer.json").read_text() == \
        (run / "tokenizer.json").read_text()
    np.testing.assert_allclose(transformers_logits(tmp_path / "out"), jaxtom_logits(run),
                               rtol=1e-4, atol=1e-4)
    unmoved = np.asarray(model(jax.numpy.asarray(PROMPT)))
    assert np.abs(unmoved - jaxtom_logits(run)).max() > 1e-2


def test_every_config_round_trips_through_the_recorded_config_json(tmp_path, monkeypatch):
    """What a training command records in its workdir rebuilds the same Config."""
    import glob

    from jaxtom.commands.export import run_config
    from jaxtom.commands.train import record_config
    from jaxtom.config import load_config

    monkeypatch.setenv("JAXTOM_MODELS", str(ROOT / "launch" / "models"))
    monkeypatch.setenv("JAXTOM_REWARD_URL", "http://127.0.0.1:1/v1")
    checked = 0
    for path in sorted(glob.glob(str(ROOT / "configs" / "*.py"))):
        if "llama3" in path:  # Llama checkpoints' config.json is not shipped
            continue
        run = tmp_path / Path(path).stem
        config = load_config(path, [f"trainer.workdir={run}"])
        record_config(config)
        assert run_config(run) == config, path
        checked += 1
    assert checked >= 20
