"""Run-directory helpers of the evaluation."""
import dataclasses
import json

import pytest

from jaxtom.config import load_config
from jaxtom.mindzero.goals_eval import load_run_config


def test_load_run_config_round_trips_config_json(tmp_path):
    cfg = load_config("configs/mindzero_gridworld_tiny.py",
                      ["mindzero.eval.seeds=(1, 2)", "mindzero.reward.format_penalty=-5.0",
                       "mindzero.data.stride=3", "trainer.stop_tokens=(1, 2)"])
    (tmp_path / "config.json").write_text(json.dumps(dataclasses.asdict(cfg), indent=1))
    assert load_run_config(tmp_path) == cfg
    (tmp_path / "config.json").write_text(json.dumps({"model": {"layers": 2}, "mindzero": {}}))
    with pytest.raises(ValueError, match="layers"):
        load_run_config(tmp_path)
    (tmp_path / "config.json").write_text(json.dumps({"model": {}}))
    with pytest.raises(ValueError, match="no mindzero section"):
        load_run_config(tmp_path)
    with pytest.raises(FileNotFoundError):
        load_run_config(tmp_path / "missing")


def test_assistance_heading_names_the_human_settings_used():
    from jaxtom.mindzero.goals_eval import markdown
    entry = {"speedup": 0.1, "speedup_se": 0.01}
    results = {"episodes": 4, "queries": 9, "goal_inference": {}, "assist_episodes": 4,
               "assistance": {"oracle": entry},
               "assist_human": {"random_prob": 0.3, "seeds": [1, 2, 5]}}
    assert "human randomness 0.3, seeds 1/2/5" in markdown(results, 2)
