"""End to end on a toy budget: warm-up, SSRL steps, checkpoint, evaluation with baselines."""
import json

import numpy as np
import pytest

from jaxtom.config import load_config
from jaxtom.mindzero.goals_eval import evaluate_run
from jaxtom.mindzero.driver import train


@pytest.mark.slow
def test_tiny_run_trains_and_evaluates(tmp_path):
    cfg = load_config("configs/mindzero_gridworld_tiny.py", [
        f"trainer.workdir='{tmp_path}'", "mindzero.data.train_episodes=12", "mindzero.data.eval_episodes=3",
        "mindzero.warmup.steps=3", "mindzero.warmup.min_distinct=0", "mindzero.warmup.min_lead=0", "mindzero.warmup.batch_size=4", "trainer.total_steps=2", "trainer.prompts_per_step=2",
        "trainer.group_size=2", "mindzero.eval.episodes=3", "mindzero.eval.seeds=(10,)", "mindzero.eval.stride=8",
        "mindzero.eval.qa_episodes=2", "model.vocab_size=320", "trainer.eval_every=2",
        "mindzero.data.val_episodes=2"])
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


@pytest.mark.slow
def test_ssrl_learns_from_the_reward_alone(tmp_path):
    """A short warm-up leaves many malformed or poor completions; SSRL, rewarded only by the
    ELBO (no labels, no teacher), must raise the share of well-formed samples over 150 steps
    on the four-hypothesis default (the default suite's micro run does 50 on two)."""
    cfg = load_config("configs/mindzero_gridworld_tiny.py", [
        f"trainer.workdir='{tmp_path}'", "mindzero.data.train_episodes=60",
        "mindzero.data.eval_episodes=4", "mindzero.warmup.steps=60",
        "mindzero.warmup.batch_size=16", "mindzero.warmup.min_distinct=0", "mindzero.warmup.min_lead=0",
        "mindzero.warmup.learning_rate=3e-3",  # the setting the figures below were measured at
        "trainer.total_steps=150", "step.warmup_steps=5",
        "step.learning_rate=1e-3",
        "trainer.prompts_per_step=8", "trainer.group_size=8", "trainer.eval_every=0",
        "mindzero.data.val_episodes=0"])
    train(cfg, progress=False)
    lines = [json.loads(x) for x in
             (tmp_path / "ssrl" / "metrics.jsonl").read_text().splitlines() if x]
    valid = np.array([x["valid"] for x in lines])
    # measured 2026-12-05 on the current default (random-direction evidence teacher): the
    # share well-formed 0.44 over the first 25 steps, 0.61 over the last 25 (step-to-step sd
    # 0.1). The mean reward is not asserted: it stayed flat (-302 -> -296 nats, sd 62 a step)
    # while the likelihood of the well-formed samples fell (-80 -> -125) as harder prompts
    # became well-formed (on the 2026-12-01 default it rose, -265 -> -200).
    assert valid[-25:].mean() > valid[:25].mean() + 0.08


def test_ssrl_micro_run_learns_the_format_from_the_reward_alone(tmp_path):
    """The main job in miniature, in the default suite (issue 33): a short label-free warm-up
    leaves a third of the answers malformed, and 50 SSRL steps rewarded by the ELBO alone
    (no labels, no teacher) must raise the share of well-formed samples by a set margin."""
    cfg = load_config("configs/mindzero_gridworld_tiny.py", [
        f"trainer.workdir='{tmp_path}'", "mindzero.data.train_episodes=30",
        "mindzero.data.eval_episodes=2", "mindzero.data.num_particles=2",
        "mindzero.warmup.steps=60", "mindzero.warmup.batch_size=16",
        "mindzero.warmup.learning_rate=3e-3", "mindzero.warmup.min_distinct=0",
        "mindzero.warmup.min_lead=0", "mindzero.warmup.retries=0", "mindzero.warmup.check_at=0",
        "trainer.total_steps=50", "step.warmup_steps=5",
        "step.learning_rate=1e-3", "trainer.max_new_tokens=48",
        "trainer.prompts_per_step=8", "trainer.group_size=8", "trainer.eval_every=0",
        "trainer.checkpoint_every=50", "mindzero.data.val_episodes=0"])
    train(cfg, progress=False)
    lines = [json.loads(x) for x in
             (tmp_path / "ssrl" / "metrics.jsonl").read_text().splitlines() if x]
    valid = np.array([x["valid"] for x in lines])
    # measured 2026-12-05 (2 cores): well-formed 0.69 over the first 15 steps, 0.81 over the
    # last 15 (each a mean over 960 samples; step-to-step sd about 0.1). The mean reward is
    # dominated by the format penalty's spread (sd ~80 nats a step), so it is not asserted.
    assert len(valid) == 50
    assert valid[-15:].mean() > valid[:15].mean() + 0.06
