"""CToM through `jaxtom train` on several processes (launched as the launchers do; CPU
collectives over gloo): 2 processes x 2 devices reach the per-step metrics and parameters of
1 process x 4 devices, and SIGKILL of both after the first checkpoint, then the same command
again, ends where the uninterrupted run ends. The model is a random stand-in saved as a
Hugging Face checkpoint with a real tokenizer.json (tests/commands/standin.py), loaded
through the normal path."""

import json
from pathlib import Path

import pytest

from tests.commands.test_multiprocess import (assert_resumes_after_sigkill, assert_same_run,
                                              finish, launch)


@pytest.fixture(scope="module")
def standin(tmp_path_factory):
    from tests.commands.standin import write_standin
    return write_standin(tmp_path_factory.mktemp("ctom_standin") / "model")


def ctom_args(config: str, standin: Path) -> list[str]:
    """The config scaled down as tests/commands/test_every_config.py does, its mesh over
    every device (data), a checkpoint after each of the 2 steps."""
    vocab = json.loads((standin / "config.json").read_text())["vocab_size"]
    return [config, f"model.path={standin}", "model.family=qwen3", f"model.vocab_size={vocab}",
            "mesh.data=-1", "mesh.fsdp=1", "mesh.tensor=1", "trainer.total_steps=2",
            "trainer.checkpoint_every=1", "trainer.keep_checkpoints=5",
            "trainer.progress=false", "ctom.simulator=scripted", "ctom.num_tasks=4",
            "trainer.prompts_per_step=2", "trainer.group_size=2", "trainer.row_len=320",
            "trainer.num_rows=0",
            "ctom.pred_row_len=256", "ctom.pred_rows=4", "ctom.controller.max_rounds=2",
            "ctom.controller.max_revisions=1", "ctom.controller.plan_cap=6",
            "ctom.controller.ask_cap=8", "ctom.controller.draft_cap=12",
            "ctom.controller.revision_cap=12", "ctom.controller.prediction_cap=8",
            "ctom.controller.response_cap=12"]


def run_and_compare(args, tmp_path: Path):
    single, multi, killed = tmp_path / "single", tmp_path / "multi", tmp_path / "killed"
    finish(launch(args, single, nproc=1))
    finish(launch(args, multi, nproc=2))
    assert_same_run(single, multi, 2, args)

    assert_resumes_after_sigkill(args, killed, multi, steps=2)


@pytest.mark.slow  # 7 JAX launches; the default suite's CToM multi-process run is
# tests/commands/test_paper_multiprocess.py (ctom_math_qwen3_8b, 2 x 4 devices)
def test_math_two_processes_equal_one_and_resume_after_sigkill(standin, tmp_path):
    """Two rounds (ASK / DRAFT, simulator replies between them), kept caches, targets."""
    run_and_compare(ctom_args("configs/ctom_math_smollm2.py", standin), tmp_path)


@pytest.mark.slow  # the paper config (LoRA, bf16 compute, 3 micro x 3 mini-batches): coding
def test_paper_coding_two_processes_equal_one_and_resume_after_sigkill(standin, tmp_path):
    """Coding runs the submissions in the sandbox (time limits): scored once, shared."""
    run_and_compare(ctom_args("configs/ctom_coding_qwen3_8b.py", standin), tmp_path)
