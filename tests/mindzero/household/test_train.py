"""Household SSRL end to end on the one trainer: symbolic rewards (default suite) and
LLM-scored rewards with a tiny random jaxtom model as the scorer (slow)."""
import dataclasses
import json

import numpy as np
import pytest

from jaxtom.mindzero import driver, task
from jaxtom.config import ConfigError, load_config
from jaxtom.mindzero.household import data as hd
from jaxtom.mindzero.household import train as ht

TINY = "configs/mindzero_household_tiny.py"


def _micro(tmp_path, *extra):
    return load_config(TINY, [
        f"trainer.workdir='{tmp_path}'", "mindzero.data.train_episodes=4",
        "mindzero.data.eval_episodes=1", "mindzero.warmup.steps=2",
        "mindzero.warmup.batch_size=4", "mindzero.warmup.min_distinct=0", "mindzero.warmup.min_lead=0",
        "trainer.total_steps=2", "trainer.prompts_per_step=2",
        "trainer.group_size=4", "trainer.max_new_tokens=64", "trainer.eval_every=0",
        "model.vocab_size=320", *extra])


def _mix_in_teacher_completions(monkeypatch, share: int = 2):
    """The sampler's rows, every `share`-th replaced by a label-free teacher completion, so a
    random-init policy's step still holds well-formed samples to score (the real sampler
    runs for every row; the replacement only changes what gets rewarded)."""
    real = ht.generate_rows
    calls = {"rows": 0}

    def generate_rows(model, prompts, row_ids, **kw):
        out = real(model, prompts, row_ids, **kw)
        rollout = generate_rows.rollout
        rng = np.random.default_rng(calls["rows"])
        records = hd.timestep_records(rollout.prompts.episodes)
        for i in range(0, len(out), share):
            e, t = records[int(rng.integers(len(records)))]
            text = hd.warmup_target(rollout.prompts.episodes[e], t,
                                    rollout.config.mindzero.data.num_particles, rng)
            out[i] = rollout.codec.completion_ids(text)
        calls["rows"] += len(out)
        return out

    monkeypatch.setattr(ht, "generate_rows", generate_rows)
    original_init = ht.ParticleRollout.__init__

    def init(self, *a, **k):
        original_init(self, *a, **k)
        generate_rows.rollout = self

    monkeypatch.setattr(ht.ParticleRollout, "__init__", init)
    return calls


def _metrics(path):
    return [json.loads(x) for x in path.read_text().splitlines() if x]


def test_symbolic_micro_run_has_a_learning_signal_and_writes_checkpoints(tmp_path, monkeypatch):
    calls = _mix_in_teacher_completions(monkeypatch)
    cfg = _micro(tmp_path, "mindzero.warmup.steps=0", "trainer.max_new_tokens=96")
    out = driver.train(cfg, progress=False)
    assert int(out["state"].step) == 2 and calls["rows"] == 2 * 2 * 4
    rows = _metrics(tmp_path / "ssrl" / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    for r in rows:
        assert np.isfinite(r["reward_mean"]) and np.isfinite(r["loss_grpo"])
        assert 0.5 <= r["valid"] <= 1.0  # the teacher rows parse
        assert r["adv_abs"] > 0  # well-formed vs malformed samples: non-zero advantages
        assert r["likelihood"] <= 0  # relative to the group's best hypothesis
    for sub in ("checkpoint", "tokenizer.json", "timings.json", "ssrl/checkpoints"):
        assert (tmp_path / sub).exists(), sub
    model, codec = ht.load_model(cfg, tmp_path / "checkpoint")
    assert model.config.vocab_size == codec.tokenizer.vocab_size
    # jaxtom eval's table on the held-out apartments (Table 1b / 4b's goal columns)
    from jaxtom.household.apartments import TEST_APARTMENTS, apartments
    from jaxtom.mindzero.household.evaluate import evaluate_run
    held_out = {a.name for a in apartments(TEST_APARTMENTS)}
    assert {ep.apartment.name for ep in out["test"]} <= held_out
    ecfg = dataclasses.replace(cfg, mindzero=dataclasses.replace(
        cfg.mindzero, eval=dataclasses.replace(cfg.mindzero.eval, episodes=1, stride=12)))
    results = evaluate_run(ecfg, tmp_path / "checkpoint", test=out["test"])
    table = results["goal_inference"]
    assert {"MindZero (trained)", "random goal", "exact posterior"} <= set(table)
    assert table["exact posterior"]["kl_exact"] < 0.05  # only the 1% mix
    assert table["exact posterior"]["log_score"] > table["random goal"]["log_score"]
    for entry in table.values():
        assert np.isfinite(entry["log_score"]) and 0 <= entry["top1"] <= 1
    assert table["MindZero (trained)"]["tflops_per_query"] > 0
    assert "| exact posterior |" in (tmp_path / "results.md").read_text()


def test_reward_terms_rank_the_true_goal_above_a_wrong_one():
    cfg = load_config(TINY, ["mindzero.data.train_episodes=4"])
    episodes = hd.make_episodes(cfg, "train")
    terms = ht.RewardTerms(cfg, episodes)
    ep = episodes[0]
    t = ep.length
    wrong = hd.observed_goal(hd.evidence(ep, ep.key_steps[0] + 1), np.random.default_rng(0))
    ll, lp = terms(np.array([0, 0]), np.array([t, t]), [(ep.goal,), (wrong,)],
                   np.array([7, 7]), 3)
    assert ll[0, 0] == 0.0 and ll[1, 0] < -5  # the best of the group is the reference
    assert lp[0, 0] > -5  # the true goal breaks at most a mild prior rule
    assert ll.shape == lp.shape == (2, 3)


def test_household_config_errors_name_the_field():
    for override, field in (("mindzero.household.likelihood=oracle", "household.likelihood"),
                            ("mindzero.household.prior=flat", "household.prior"),
                            ("mindzero.household.test_apartments=(0,)",
                             "household.test_apartments"),
                            ("mindzero.data.observation=image", "data.observation"),
                            ("mindzero.data.task=goals", "data.task")):
        with pytest.raises(ConfigError, match=field):
            task.get(load_config(TINY, [override]))  # the task is checked where it is found
    with pytest.raises(ConfigError, match="scorer_url"):
        load_config(TINY, ["mindzero.household.likelihood=llm",
                           "mindzero.household.scorer=http"])
    ablations = load_config(TINY, ["mindzero.household.prior=none",
                                   "mindzero.data.num_particles=1",
                                   "mindzero.reward.entropy_weight=0.0"])
    assert ablations.mindzero.household.prior == "none"


@pytest.mark.slow  # ~1-2 min on 2 cores (two model compiles plus the scorer's)
def test_llm_scored_ssrl_runs_two_grpo_steps(tmp_path, monkeypatch):
    """The paper's reward path: likelihood and prior are A/B option scores of an LLM, here the
    policy's frozen starting model (a tiny random Qwen3 stand-in with a chat template),
    through the cache; every well-formed hypothesis is scored by it."""
    from tests.commands.standin import write_standin
    standin = write_standin(tmp_path / "standin")
    scored = {"queries": 0}
    real_scorer = ht.option_scorer

    def option_scorer(config, model=None, codec=None):
        scorer = real_scorer(config, model, codec)
        inner = scorer.option_logprobs

        def counting(queries):
            scored["queries"] += len(queries)
            return inner(queries)
        scorer.option_logprobs = counting
        return scorer

    monkeypatch.setattr(ht, "option_scorer", option_scorer)
    _mix_in_teacher_completions(monkeypatch)
    # the stand-in's BPE (trained on other text) spells a teacher completion in ~280 tokens
    cfg = _micro(tmp_path / "run", f"model.path={standin}", "mindzero.warmup.steps=0",
                 "trainer.max_new_tokens=320",
                 "mindzero.household.likelihood=llm", "mindzero.household.prior=llm",
                 "mindzero.household.scorer=reference")
    out = driver.train(cfg, progress=False)
    assert int(out["state"].step) == 2
    rows = _metrics(tmp_path / "run" / "ssrl" / "metrics.jsonl")
    assert len(rows) == 2 and scored["queries"] > 0
    for r in rows:
        assert np.isfinite(r["reward_mean"]) and r["adv_abs"] > 0
        assert np.log(1e-10) <= r["likelihood"] <= 0 and np.log(1e-10) <= r["prior"] <= 0
    assert (tmp_path / "run" / "checkpoint").exists()
