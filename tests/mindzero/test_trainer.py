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


def test_qk_norm_is_a_model_switch_and_the_goal_default_turns_it_off(tmp_path):
    """The goal-inference CPU default drops Qwen3's q/k norm (it held a from-scratch model's
    fixed-slot copy back); the family default stays, and such a decoder is not exported as an
    HF architecture it is not."""
    from jaxtom.mindzero.trainer import build_model
    from jaxtom.models.config import config_to_hf_dict

    default = load_config("configs/mindzero_gridworld_tiny.py")
    assert default.model.uses_qk_norm is False
    assert load_config("configs/mindzero_qa_tiny.py").model.uses_qk_norm is True
    texts = ["n=2 | 3 4 5 red square", '{"particles":[]}'] * 20
    from jaxtom.mindzero.policy import train_bpe
    train_bpe(texts, 300, tmp_path / "tokenizer.json")
    for on in (True, False):
        cfg = load_config("configs/mindzero_gridworld_tiny.py", [f"model.qk_norm={str(on).lower()}"])
        model, _ = build_model(cfg, tmp_path)
        assert model.config.qk_norm is on
        names = {"/".join(map(str, p)) for p, _ in __import__("flax").nnx.to_flat_state(
            __import__("flax").nnx.state(model))}
        assert any("q_norm" in n for n in names) is on
        if on:
            assert config_to_hf_dict(model.config)["model_type"] == "qwen3"
        else:
            with pytest.raises(ValueError, match="qk_norm=False has no transformers"):
                config_to_hf_dict(model.config)
    with pytest.raises(ConfigError, match="model.qk_norm"):
        load_config("configs/mindzero_gridworld_tiny.py", ["model.qk_norm=maybe"])
