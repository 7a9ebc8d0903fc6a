"""The MindZero trainer's guards."""
import pytest

from jaxtom.config import ConfigError, load_config
from jaxtom.mindzero.trainer import WarmupCollapsed, check_warmup


def test_an_input_independent_warmup_stops_the_run_with_what_to_do():
    live = {"top1": 0.2, "log_score": -5.0, "distinct_completions": 40.0}
    assert check_warmup(live, 8) == live
    constant = dict(live, distinct_completions=1.0)
    with pytest.raises(WarmupCollapsed, match=r"1 distinct completions .*expected >= 8.*"
                                              r"mindzero.warmup.steps"):
        check_warmup(constant, 8)
    assert check_warmup(constant, 0) == constant  # 0 turns the check off


def test_the_cpu_default_checks_its_warmup_and_rejects_a_negative_threshold():
    assert load_config("configs/mindzero_gridworld_tiny.py").mindzero.warmup.min_distinct > 1
    with pytest.raises(ConfigError, match="min_distinct"):
        load_config("configs/mindzero_gridworld_tiny.py", ["mindzero.warmup.min_distinct=-1"])
