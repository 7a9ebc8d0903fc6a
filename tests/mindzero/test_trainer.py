"""The MindZero trainer's guards."""
import json

import numpy as np
import pytest

from jaxtom.config import ConfigError, load_config
from jaxtom.mindzero import task
from jaxtom.mindzero.warmup import WarmupCollapsed, check_warmup


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
    from jaxtom.mindzero.goals_text import build_model
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


def test_a_warmup_that_does_not_name_the_lead_stops_the_run_with_what_to_do():
    live = {"top1": 0.2, "log_score": -5.0, "distinct_completions": 40.0, "lead_first": 0.9}
    assert check_warmup(live, 8, 0.5) == live
    blind = dict(live, lead_first=0.1)
    with pytest.raises(WarmupCollapsed, match=r"lead first in 0.1 .*expected >= 0.5.*retries"):
        check_warmup(blind, 8, 0.5)
    assert check_warmup(blind, 8) == blind  # min_lead 0 turns the check off
    with pytest.raises(WarmupCollapsed, match="lead first in None"):  # a monitor without it
        check_warmup({k: v for k, v in live.items() if k != "lead_first"}, 8, 0.5)
    with pytest.raises(ConfigError, match="min_lead"):
        load_config("configs/mindzero_gridworld_tiny.py", ["mindzero.warmup.min_lead=1.5"])
    with pytest.raises(ConfigError, match="retries"):
        load_config("configs/mindzero_gridworld_tiny.py", ["mindzero.warmup.retries=-1"])


def test_lead_first_counts_answers_whose_first_hypothesis_names_the_listed_lead(episodes):
    from jaxtom.mindzero.monitor import monitor_scores
    from jaxtom.mindzero.observation import HostEpisodes, approach_order
    from jaxtom.mindzero.particles import format_particles
    view = HostEpisodes.from_episodes(episodes)
    rows = [(e, t) for e in range(len(view)) for t in (1, int(view.length[e]) - 1)]
    true = np.zeros(len(rows), int)
    texts = []
    for i, (e, t) in enumerate(rows):
        order = approach_order(view, e, t)
        lead, other, third = order[0], order[1], order[2]
        first = (lead, other) if i % 2 == 0 else (other, lead)  # odd rows: the lead second
        texts.append(format_particles([first, (lead, third)], [0.6, 0.4], view.labels[e]))
    texts[0] = "not json"  # malformed: does not count as naming the lead
    scores = monitor_scores(texts, rows, true, view, 2, 0.01)
    expected = sum(1 for i in range(1, len(rows)) if i % 2 == 0) / len(rows)
    assert scores["lead_first"] == pytest.approx(expected)


def test_a_failed_warmup_is_retried_from_a_fresh_initialisation_then_stops(tmp_path):
    """min_lead 1.0 is out of reach of a 3-step warm-up: the run retries once from init seed
    +1 (its own checkpoints) and then stops, saving nothing as the warm-up."""
    from jaxtom.mindzero.driver import train
    from tests.mindzero.test_determinism import MICRO
    cfg = load_config("configs/mindzero_gridworld_tiny.py", [
        f"trainer.workdir='{tmp_path}'", *MICRO, "mindzero.warmup.min_lead=1.0",
        "mindzero.warmup.retries=1"])
    with pytest.raises(WarmupCollapsed, match="lead first"):
        train(cfg, progress=False)
    assert (tmp_path / "warmup_train" / "checkpoints").is_dir()
    assert (tmp_path / "warmup_train_1" / "checkpoints").is_dir()
    assert not (tmp_path / "warmup").exists() and not (tmp_path / "ssrl").exists()
    first = [json.loads((tmp_path / d / "metrics.jsonl").read_text().split("\n")[0])
             for d in ("warmup_train", "warmup_train_1")]
    assert first[0]["grad_norm"] != first[1]["grad_norm"]  # same batch, another init


def test_an_early_check_abandons_a_warmup_attempt_at_its_step_and_a_rerun_skips_it(tmp_path):
    """With warmup.check_at, an attempt that fails the checks at that step stops there (no
    step past it is trained), is marked abandoned, and a rerun of the run directory does not
    train it again; the retry runs its own attempt."""
    from jaxtom.mindzero.driver import train
    from jaxtom.mindzero.warmup import EarlyWarmupCheck
    from tests.mindzero.test_determinism import MICRO
    cfg = load_config("configs/mindzero_gridworld_tiny.py", [
        f"trainer.workdir='{tmp_path}'", *MICRO, "mindzero.warmup.steps=4",
        "mindzero.warmup.check_at=2", "mindzero.warmup.min_lead=1.0",
        "mindzero.warmup.retries=1"])
    for _ in range(2):  # the second run finds both attempts abandoned
        with pytest.raises(WarmupCollapsed, match="lead first"):
            train(cfg, progress=False)
        for d in ("warmup_train", "warmup_train_1"):
            marker = json.loads((tmp_path / d / EarlyWarmupCheck.MARKER).read_text())
            assert marker["step"] == 2 and "lead_first" in marker["scores"]
            steps = [json.loads(x)["step"] for x in
                     (tmp_path / d / "metrics.jsonl").read_text().splitlines() if x]
            assert steps == [1]  # step 2's row is not logged: it stopped at its check
    with pytest.raises(ConfigError, match="check_at"):
        load_config("configs/mindzero_gridworld_tiny.py", ["mindzero.warmup.check_at=-1"])
    with pytest.raises(ConfigError, match="evidence_order"):
        load_config("configs/mindzero_gridworld_tiny.py", ["mindzero.warmup.evidence_order=up"])


def _tiny_decoder(seed):
    from jaxtom.models import init_decoder
    from jaxtom.models.config import ModelConfig
    cfg = ModelConfig(family="qwen3", vocab_size=64, hidden_size=16, intermediate_size=32,
                      num_layers=1, num_heads=2, num_kv_heads=1, head_dim=8,
                      max_position_embeddings=64)
    return init_decoder(cfg, seed=seed)


def _leaves(model):
    import jax
    from flax import nnx
    return [np.asarray(x) for x in jax.tree.leaves(nnx.state(model))]


def test_best_model_keeps_the_best_monitor_score_and_a_rerun_chooses_from_the_same_record(
        tmp_path):
    """The hook scores each model it is given (recorded: it is the model passed, not another),
    keeps the best log score (the warm-up's at step 0 included; ties keep the earlier step),
    leaves one kept model on disk, and a new hook on the same directory (a resumed run)
    starts from that record."""
    from jaxtom.mindzero.monitor import BestModel
    scripted = {50: -4.0, 100: -3.0, 150: -3.0, 200: -6.0}
    seen = []

    def monitor(step, model):
        seen.append((step, _leaves(model)[0].sum()))
        return {"log_score": scripted[step], "top1": 0.3}

    warm = _tiny_decoder(0)
    models = {s: _tiny_decoder(s) for s in scripted}
    best = BestModel(monitor, tmp_path, warm, {"log_score": -5.0})
    out = [best(s, models[s]) for s in (50, 100, 150)]
    assert [o["kept_step"] for o in out] == [50, 100, 100]
    assert [s for s, _ in seen] == [50, 100, 150]
    assert [v for _, v in seen] == [_leaves(models[s])[0].sum() for s in (50, 100, 150)]
    assert sorted(p.name for p in tmp_path.glob("best_*")) == ["best_100"]
    resumed = BestModel(monitor, tmp_path, warm, {"log_score": 0.0})  # record wins
    assert resumed.record == {"step": 100, "log_score": -3.0}
    assert resumed(200, models[200])["kept_step"] == 100
    kept = resumed.chosen(models[200])
    assert all(np.array_equal(a, b) for a, b in zip(_leaves(kept), _leaves(models[100])))


def test_best_model_keeps_the_warmup_when_ssrl_never_beats_it(tmp_path):
    from jaxtom.mindzero.monitor import BestModel
    warm, later = _tiny_decoder(0), _tiny_decoder(1)
    best = BestModel(lambda step, model: {"log_score": -6.0}, tmp_path, warm,
                     {"log_score": -5.0})
    assert best(50, later)["kept_step"] == 0
    assert best.chosen(later) is warm and not list(tmp_path.glob("best_*"))


def test_validation_episodes_are_apart_from_train_and_eval_and_need_a_monitor():
    from jaxtom.gridworld.episodes import layout_keys
    from jaxtom.mindzero.goals_text import make_episodes, validation_episodes
    cfg = load_config("configs/mindzero_gridworld_tiny.py", [
        "mindzero.data.train_episodes=20", "mindzero.data.eval_episodes=10",
        "mindzero.data.val_episodes=10"])
    train, test = make_episodes(cfg)
    val = validation_episodes(cfg, train, test)
    assert len(layout_keys(val)) == 10
    assert not layout_keys(val) & (layout_keys(train) | layout_keys(test))
    off = load_config("configs/mindzero_gridworld_tiny.py", ["mindzero.data.val_episodes=0"])
    assert validation_episodes(off, train, test) is None
    for bad in (["mindzero.data.val_episodes=-1"],
                ["mindzero.data.val_episodes=5", "trainer.eval_every=0"],
                ["mindzero.data.val_episodes=5", "mindzero.data.observation='image'"],
                ["mindzero.data.val_episodes=5", "mindzero.data.task='qa'",
                 "mindzero.data.observation='compact'"]):
        with pytest.raises(ConfigError, match="val_episodes"):
            task.get(load_config("configs/mindzero_gridworld_tiny.py", bad))


def test_the_default_keeps_its_last_model_and_the_best_model_rule_is_an_override(tmp_path):
    """`data.keep`: the CPU default keeps its last SSRL model (its validation episodes feed
    the monitor and the warm-up checks); `keep=best` turns the best-monitor rule on."""
    from jaxtom.mindzero.goals_text import prepare
    small = ["mindzero.data.train_episodes=6", "mindzero.data.eval_episodes=2",
             "mindzero.data.val_episodes=2", "model.vocab_size=320"]
    kept = {}
    for rule in ("last", "best"):
        cfg = load_config("configs/mindzero_gridworld_tiny.py",
                          small + [f"mindzero.data.keep={rule}"])
        kept[rule] = prepare(cfg, tmp_path / rule, None).keep_best
    assert kept == {"last": False, "best": True}
    assert load_config("configs/mindzero_gridworld_tiny.py").mindzero.data.keep == "last"
    with pytest.raises(ConfigError, match="data.keep"):
        load_config("configs/mindzero_gridworld_tiny.py", ["mindzero.data.keep=worst"])

