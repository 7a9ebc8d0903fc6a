"""QA accuracy of the evaluation (appendix B.2): answers from goal distributions at the
questions' steps, per question type, for models and the exact-posterior / random baselines."""
import jax
import numpy as np
import pytest

from jaxtom.gridworld import qa_episodes
from jaxtom.mindzero import evaluate as ev
from jaxtom.mindzero.observation import HostEpisodes
from jaxtom.mindzero.goals_eval import qa_markdown

KEYS = {"overall", "overall_se", "decided"} | {
    f"type{k}{s}" for k in (1, 2, 3) for s in ("", "_se", "_n")}


@pytest.fixture(scope="module")
def qa_set(params):
    return qa_episodes(jax.random.key(5), params, 4, batch_size=256)


class _Codec:
    def prompt_ids(self, text):
        return [len(text)]


def test_qa_scores_exact_beats_chance_and_models_are_batched(qa_set, params, monkeypatch):
    episodes, questions = qa_set
    view = HostEpisodes.from_episodes(episodes)
    calls = []

    def fake_sampler(model, codec, prompts, **kwargs):  # a model that never writes JSON
        calls.append((list(prompts), kwargs["temperature"]))
        return ["no particles"] * len(prompts), [[1]] * len(prompts), [1] * len(prompts)

    monkeypatch.setattr(ev, "sample_completions", fake_sampler)
    queries = ev.TextQueries(None, _Codec(), "compact", 2)
    beliefs, index = ev.qa_beliefs({"broken model": queries}, view, questions, params,
                                   num_particles=2, max_new_tokens=8)
    rows, _ = ev.qa_rows(questions)
    # greedy queries depend only on their prompt: batched GREEDY_ROWS at a time, each row once
    sizes = [len(p) for p, _ in calls]
    assert sizes == [min(ev.GREEDY_ROWS, len(rows) - k)
                     for k in range(0, len(rows), ev.GREEDY_ROWS)]
    assert all(temp == 0.0 for _, temp in calls)
    sent = sorted(x for p, _ in calls for x in p)
    assert sent == sorted(_Codec().prompt_ids(ev.get_observation("compact")(view, e, t, 2))
                          for e, t in rows)
    assert all(rows[i] == (q.episode, q.step) for q, i in zip(questions, index))
    table = ev.qa_scores(beliefs, questions, index, seed=0)
    assert set(table) == {"broken model", "random goal", "exact posterior",
                          "exact posterior top-2"}
    for entry in table.values():
        assert set(entry) == KEYS
        assert [entry[f"type{k}_n"] for k in (1, 2, 3)] == [len(episodes)] * 3
        assert all(0.0 <= entry[k] <= 1.0 for k in ("overall", "type1", "type2", "type3"))
    # questions are posed only where the exact posterior's choice is the truth
    assert table["exact posterior"]["overall"] == 1.0
    assert table["exact posterior"]["overall"] > max(table["random goal"]["overall"], 0.5)
    assert table["exact posterior"]["decided"] == 1.0
    assert table["broken model"]["decided"] == 0.0  # parse failures: every answer a coin flip
    assert table == ev.qa_scores(beliefs, questions, index, seed=0)  # seeded tie-breaks
    md = "\n".join(qa_markdown({"episodes": len(episodes), "questions": len(questions),
                                "accuracy": table}))
    assert "| exact posterior | 1.000 ± 0.000" in md and "| broken model |" in md


def test_qa_from_beliefs_picks_the_heavier_option():
    rng = np.random.default_rng(0)
    belief = np.zeros(56)
    belief[3], belief[7] = 0.2, 0.8
    assert ev.qa_from_beliefs(belief, (3, 7), rng) == 1
    assert ev.qa_from_beliefs(belief, (7, 3), rng) == 0
    assert {ev.qa_from_beliefs(belief, (1, 2), rng) for _ in range(50)} == {0, 1}
