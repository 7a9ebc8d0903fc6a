"""End to end: the CPU QA default, shrunk, learns from the QA reward alone (no answer labels):
its held-out greedy accuracy rises well above the starting model's, with both letters in use.
A few minutes on 2 cores, so `-m slow`."""
import json

import pytest

from jaxtom.config import load_config
from jaxtom.mindzero.qa_train import evaluate_qa_run
from jaxtom.mindzero.driver import train


@pytest.mark.slow
def test_qa_ssrl_beats_its_starting_model(tmp_path):
    cfg = load_config("configs/mindzero_qa_tiny.py", [
        f"trainer.workdir={tmp_path}", "trainer.progress=false", "mindzero.data.train_episodes=80",
        "mindzero.data.eval_episodes=40", "mindzero.warmup.steps=60", "trainer.total_steps=200",
        "trainer.eval_every=200"])
    out = train(cfg, progress=False)
    start = out["timings"]["start_monitor"]
    rows = [json.loads(x) for x in (tmp_path / "ssrl" / "metrics.jsonl").read_text().splitlines()]
    assert rows[-1]["eval/accuracy"] > start["accuracy"] + 0.15, (start, rows[-1])
    assert 0.1 < rows[-1]["eval/answer_a"] < 0.9  # not one letter for every question
    table = evaluate_qa_run(cfg, tmp_path / "checkpoint", test=out["test"])["accuracy"]
    trained, untrained = table["MindZero (greedy)"], table["untrained (greedy)"]
    assert trained["overall"] - untrained["overall"] > 2 * max(trained["overall_se"], 0.03)
    assert table["exact posterior"]["overall"] == 1.0 and trained["valid"] == 1.0
