"""Household QA on the trainer: scripted rollouts get qa.rewards and group advantages, mirrored
groups swap letters and likelihoods, the warm-up never reads answers, and a tiny random
decoder answers through evaluate_model (Table 4b rows)."""
import functools

import jax
import numpy as np
import pytest

from jaxtom.mindzero.household import qa
from jaxtom.mindzero.household import qa_ssrl
from jaxtom.household.apartments import TEST_APARTMENTS, apartments
from jaxtom.household.episodes import generate_episodes
from jaxtom.mindzero import qa as mindzero_qa
from jaxtom.mindzero.qa import QAWarmupRollout
from jaxtom.rl.losses import group_advantages
from jaxtom.rl.trainer import TrainerConfig


@functools.lru_cache(maxsize=None)
def _set():
    episodes = generate_episodes(apartments(TEST_APARTMENTS), 8, seed=3)
    return episodes, qa.make_questions(episodes, seed=3)


class _Codec:
    """One token per character (ids 1..63); 0 is eos."""
    eos_ids, pad_id = (0,), 0

    def prompt_ids(self, text):
        return [1 + (ord(c) % 60) for c in text[-24:]]

    def completion_ids(self, text):
        return [ord(c) for c in text] + [0]

    def decode(self, ids):
        return "".join(chr(i) for i in ids if i)


def test_rollout_rewards_scripted_answers(monkeypatch):
    episodes, qs = _set()
    answers = ["a", "\\boxed{b}", "a or b", ""]
    monkeypatch.setattr(mindzero_qa, "generate_rows", lambda model, prompts, rows, **kw: [
        [ord(c) for c in answers[int(r) % 4]] + [0] for r in rows])
    prompts = qa_ssrl.QAPrompts("compact", _Codec(), episodes, qs)
    rollout = qa_ssrl.QARollout(TrainerConfig(group_size=4, max_new_tokens=8), _Codec(), prompts)
    tasks = [{"question": i, "row": j} for j, i in enumerate((0, 3))]
    out = rollout(None, tasks, jax.random.key(0), 0)
    expected = []
    for t in tasks:
        q = qs[t["question"]]
        expected += list(qa.rewards([q] * 4, [0, 1, -1, -1]))
    np.testing.assert_allclose(out.advantages, group_advantages(np.float32(expected), 4),
                               atol=1e-5)
    assert out.metrics["valid"] == 0.5 and out.metrics["answer_a"] == 0.25
    assert out.group_ids == [0] * 4 + [1] * 4


def test_mirror_swaps_options_and_likelihoods(monkeypatch):
    episodes, qs = _set()
    monkeypatch.setattr(mindzero_qa, "generate_rows",
                        lambda model, prompts, rows, **kw: [[ord("a"), 0] for _ in rows])
    prompts = qa_ssrl.QAPrompts("figure", _Codec(), episodes, qs)
    n = len(qs)
    rollout = qa_ssrl.QARollout(TrainerConfig(group_size=2), _Codec(), prompts, mirror=True)
    q, m = prompts.questions[1], prompts.questions[n + 1]
    assert (m.options, m.log_lik, m.answer) == (q.options[::-1], q.log_lik[::-1], 1 - q.answer)
    out = rollout(None, [{"question": 1, "row": 0}], jax.random.key(0), 0)
    assert out.group_ids == [0, 0, 1, 1] and out.metrics["agrees_with_label"] == 0.5


def test_warmup_letters_do_not_read_the_answer():
    episodes, qs = _set()
    prompts = qa_ssrl.QAPrompts("compact", _Codec(), episodes, qs)
    warm = QAWarmupRollout(_Codec(), prompts, seed=1)
    tasks = [{"question": i % len(qs), "row": i} for i in range(200)]
    letters = [s[-2] for s in warm(None, tasks, None, 0).sequences]
    prompts.questions = [qa_ssrl.mirrored(q) for q in qs]
    assert [s[-2] for s in warm(None, tasks, None, 0).sequences] == letters
    assert 0.35 < np.mean([c == ord("a") for c in letters]) < 0.65


@pytest.mark.slow  # ~20 s of sampler compiles on 2 cores
def test_a_tiny_model_answers_through_evaluate_model():
    from jaxtom.models import ModelConfig, init_decoder
    episodes, qs = _set()
    cfg = ModelConfig(family="qwen3", vocab_size=128, hidden_size=32, intermediate_size=64,
                      num_layers=1, num_heads=2, num_kv_heads=1, head_dim=16, qk_norm=True,
                      max_position_embeddings=128)
    model = init_decoder(cfg, seed=0)
    tables = qa_ssrl.evaluate_model({"random init": (model, _Codec())}, "compact", episodes,
                                    qs[:6], max_new_tokens=2, key=jax.random.key(0),
                                    sampled=False)
    row = tables["random init (greedy)"]
    assert row["overall"][2] == 6 and 0 <= row["overall"][0] <= 1
    assert row["tflops_per_question"] > 0
    assert tables["planner's own belief"]["overall"][0] == 1.0
    text = qa.markdown(tables)
    assert "random init (greedy)" in text and "1.1 true belief" in text


@pytest.mark.slow  # sampler + update compiles
def test_two_ssrl_steps_on_the_trainer(tmp_path):
    """QA SSRL on the one trainer: 2 GRPO steps of a tiny decoder on compact questions, the
    label-free reward logged."""
    import json

    from jaxtom import rl
    from jaxtom.models import ModelConfig, init_decoder
    from jaxtom.rl.trainer import Trainer
    episodes, qs = _set()
    cfg = ModelConfig(family="qwen3", vocab_size=128, hidden_size=32, intermediate_size=64,
                      num_layers=1, num_heads=2, num_kv_heads=1, head_dim=16, qk_norm=True,
                      max_position_embeddings=128)
    model = init_decoder(cfg, seed=0)
    tcfg = TrainerConfig(workdir=str(tmp_path), total_steps=2, group_size=4, prompts_per_step=2,
                         max_new_tokens=2, row_len=32, checkpoint_every=2, progress=False)
    prompts = qa_ssrl.QAPrompts("compact", _Codec(), episodes, qs)
    trainer = Trainer(model, qa_ssrl.question_tasks(qs),
                      qa_ssrl.QARollout(tcfg, _Codec(), prompts, mirror=True),
                      rl.StepConfig(learning_rate=1e-3, kl_coef=0.0), tcfg)
    trainer.run()
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert all(np.isfinite(r["reward_mean"]) and 0 <= r["valid"] <= 1 for r in rows)
