"""Every paper config starts where its users run it: `jaxtom train` as 2 processes x 4
simulated CPU devices, loading a saved Hugging Face checkpoint (a scaled-down random model of
the config's family, written by `save_pretrained` and read through the normal loading path
into the run's mesh), reaches the metrics and parameters of 1 process x 8 devices; SIGKILL of
both processes after a checkpoint, then the same command again, ends identical to the
uninterrupted run.

Under `-m slow` every paper config runs all of it (four launches: minutes on 2 cores each);
the default suite runs the 2 x 4 = 1 x 8 half for a MindZero and a CToM config.
"""

import json
from pathlib import Path

import pytest

from tests.commands.test_every_config import CONFIGS, _overrides, needs_checkpoint
from tests.commands.test_multiprocess import (assert_resumes_after_sigkill, assert_same_run,
                                              finish, launch)

PAPER = [p for p in CONFIGS if needs_checkpoint(p)]
DEFAULT = ("mindzero_gridworld_qwen3_4b", "ctom_math_qwen3_8b")


def _family(path: str) -> str:
    name = Path(path).stem
    return "vl" if "qwen3vl" in name else "llama" if "llama" in name else "qwen3"


@pytest.fixture(scope="module")
def standins(tmp_path_factory):
    """Stand-in checkpoints, one per architecture family, written once per module."""
    from tests.commands.standin import write_standin, write_vl_standin
    root = tmp_path_factory.mktemp("standins")
    return {"qwen3": lambda: write_standin(root / "qwen3"),
            "llama": lambda: write_standin(root / "llama", family="llama"),
            "vl": lambda: write_vl_standin(root / "vl")}


def _args(path: str, standin: Path) -> list[str]:
    """The config with test sizes (tests/commands/test_every_config.py), a checkpoint every
    step, and `model.path` the stand-in of its family."""
    out = [a for a in _overrides(path, standin, Path("unused"))
           if not a.startswith(("trainer.workdir=", "model.path=", "trainer.checkpoint_every="))]
    if Path(path).stem.startswith("mindzero"):
        # a random stand-in's SSRL groups mostly tie (zero advantages, zero gradients), so
        # a 2-step supervised warm-up gives the comparison real updates
        out += ["mindzero.warmup.steps=2", "mindzero.warmup.min_distinct=0",
                "mindzero.warmup.min_lead=0", "mindzero.warmup.batch_size=4"]
    return [path, *out, f"model.path={standin}", "trainer.checkpoint_every=1",
            "trainer.keep_checkpoints=5"]


def _text_config(standin: Path):
    """The loaded checkpoint's text-model sizes (what the tolerances scale with)."""
    cfg = json.loads((standin / "config.json").read_text())
    from jaxtom.models.config import config_from_hf_dict
    from jaxtom.models.vl_config import is_vl_dict, vl_config_from_hf_dict
    return vl_config_from_hf_dict(cfg).text if is_vl_dict(cfg) else config_from_hf_dict(cfg)


def _params():
    """Every config with the SIGKILL half, and every config's equality half alone (two
    launches), under `-m slow`; the default suite runs the equality half for DEFAULT (its
    CI budget has no room for four launches of each)."""
    full = [pytest.param(p, True, id=Path(p).stem, marks=pytest.mark.slow) for p in PAPER]
    return full + [pytest.param(p, False, id=f"{Path(p).stem}-no_kill",
                                marks=() if Path(p).stem in DEFAULT else pytest.mark.slow)
                   for p in PAPER]


@pytest.mark.parametrize("path, kill", _params())
def test_paper_config_on_two_processes_equals_one_and_resumes(path, kill, standins,
                                                              tmp_path):
    standin = standins[_family(path)]()
    args = _args(path, standin)
    mindzero = Path(path).stem.startswith("mindzero")
    phase = "ssrl" if mindzero else ""
    single, multi, killed = tmp_path / "single", tmp_path / "multi", tmp_path / "killed"
    finish(launch(args, single, nproc=1, devices=8))
    finish(launch(args, multi, nproc=2, devices=8))
    from jaxtom.config import load_config
    warmup_lr = load_config(args[0], args[1:]).mindzero.warmup.learning_rate if mindzero else 0
    for part in ("warmup_train", "ssrl") if mindzero else ("",):
        # the held-out monitor samples at its temperature from a model the warm-up's Adam
        # steps left apart by float rounding, so its counts of sampled texts are not
        # compared (the rollouts' are: they match); the monitor still runs on 2 processes
        # SSRL starts from each run's warm-up model, so its parameters carry the warm-up's
        # rounding differences: both phases are bounded at the warm-up's learning rate
        assert_same_run(single / part, multi / part, 2, args, model=_text_config(standin),
                        learning_rate=warmup_lr or None, skip=("eval/",))
    learned = [json.loads(line)["grad_norm"] for line in
               (single / ("warmup_train" if mindzero else "") / "metrics.jsonl").open()]
    assert max(learned) > 0, learned  # the compared parameters really were updated
    if not kill:
        return

    assert_resumes_after_sigkill(args, killed, multi, phase, steps=2, devices=8)
