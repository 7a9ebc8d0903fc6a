"""End to end on a toy budget: warm-up, SSRL steps, checkpoint, evaluation with baselines."""
import json

import numpy as np
import pytest

from jaxtom.config import load_config
from jaxtom.mindzero.run import evaluate_run
from jaxtom.mindzero.trainer import train


@pytest.mark.slow
def test_tiny_run_trains_and_evaluates(tmp_path):
    cfg = load_config("configs/mindzero_gridworld_tiny.py", [
        f"trainer.workdir='{tmp_path}'", "mindzero.data.train_episodes=12", "mindzero.data.eval_episodes=3",
        "mindzero.warmup.steps=3", "mindzero.warmup.min_distinct=0", "mindzero.warmup.batch_size=4", "trainer.total_steps=2", "trainer.prompts_per_step=2",
        "trainer.group_size=2", "mindzero.eval.episodes=3", "mindzero.eval.seeds=(10,)", "mindzero.eval.stride=8",
        "mindzero.eval.qa_episodes=2", "model.vocab_size=320"])
    out = train(cfg, progress=False)
    assert (tmp_path / "checkpoint").exists() and (tmp_path / "warmup").exists()
    assert list((tmp_path / "ssrl" / "tensorboard").iterdir())
    results = evaluate_run(cfg, tmp_path / "checkpoint", test=out["test"], progress=False)
    table = results["goal_inference"]
    assert {"MindZero", "untrained (warm-up only)", "random goal", "exact posterior"} <= set(table)
    assert table["exact posterior"]["top1"] > table["uniform"]["top1"]
    for entry in table.values():
        assert np.isfinite(entry["log_score"]) and 0 <= entry["top1"] <= 1
    assert "top1_margin" in table["random goal"]
    assert np.isfinite(results["assistance"]["MindZero"]["speedup"])
    saved = json.loads((tmp_path / "results.json").read_text())
    assert saved["queries"] == results["queries"]
    assert (tmp_path / "goal_accuracy.png").stat().st_size > 1000
    assert "| MindZero |" in (tmp_path / "results.md").read_text()
    qa = saved["qa"]
    assert qa["episodes"] == 2 and qa["questions"] == 6
    assert qa["accuracy"]["exact posterior"]["overall"] == 1.0
    assert 0 <= qa["accuracy"]["MindZero"]["overall"] <= 1
    assert "| exact posterior | 1.000" in (tmp_path / "results.md").read_text()
