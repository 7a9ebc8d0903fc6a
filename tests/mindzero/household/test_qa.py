import numpy as np
import pytest

from jaxtom.mindzero.household.qa_answers import accuracy_by_type, binomial_band, parse_answer


@pytest.mark.parametrize("text,choice", [
    ("a", 0), ("B", 1), ("(a)", 0), ("(b).", 1), ("\\boxed{a}", 0), ("\\boxed{(b)}", 1),
    ("Answer: b", 1), ("The answer is \\boxed{a}.", 0),
    ("<thinking>a bowl could be in b</thinking> \\boxed{b}", 1),
    ("<think>maybe a</think>b", 1),
    ("a or b", -1), ("", -1), ("c", -1), ("(c)", -1), ("\\boxed{a} \\boxed{b}", -1),
    ("\\boxed{}", -1), ("<thinking> a", -1), ("\\boxed{a or b}", -1), (None, -1), (3, -1),
])
def test_parse_answer(text, choice):
    assert parse_answer(text) == choice


def test_accuracy_by_type_clusters_by_episode():
    out = accuracy_by_type([0, 1, -1, 0], [0, 1, 1, 1], ["1.1", "1.1", "2.1", "2.1"],
                           [0, 0, 1, 1])
    assert out["1.1"][0] == 1.0 and out["2.1"][0] == 0.0
    assert out["overall"][0] == pytest.approx(0.5) and out["overall"][2] == 4
    with pytest.raises(ValueError):
        accuracy_by_type([], [], [], [])


def test_binomial_band():
    lo, hi = binomial_band(400)
    assert lo == pytest.approx(0.425) and hi == pytest.approx(0.575)


# --- generated questions ---------------------------------------------------------------------
import functools
import math

from jaxtom.mindzero.household import qa
from jaxtom.household.apartments import TEST_APARTMENTS, apartments
from jaxtom.household.episodes import generate_episodes
from jaxtom.household.human import action_distribution, action_probability
from jaxtom.household.world import open_


@functools.lru_cache(maxsize=None)
def _qa_set(seed=0, n=24):
    episodes = generate_episodes(apartments(TEST_APARTMENTS), n, seed=seed)
    return episodes, qa.make_questions(episodes, seed=seed, per_type=2)


def test_every_type_is_generated_and_order_is_random():
    episodes, qs = _qa_set()
    kinds = {q.qtype for q in qs}
    assert kinds == set(qa.QUESTION_TYPES)
    answers = np.array([q.answer for q in qs])
    lo, hi = binomial_band(len(qs))
    assert lo <= answers.mean() <= hi
    assert qa.make_questions(episodes, seed=0, per_type=2) == qs  # deterministic


def test_planner_belief_answers_everything():
    episodes, qs = _qa_set()
    choices = [qa.planner_answer(episodes[q.episode], q) for q in qs]
    assert choices == [q.answer for q in qs]


def test_answer_rules():
    episodes, qs = _qa_set()
    for q in qs:
        ep = episodes[q.episode]
        s = ep.states[q.step]
        truth = q.options[q.answer]
        if q.qtype in ("1.1", "1.2", "2.1", "2.2"):
            a = ep.actions[q.step - 1]
            assert a.verb == "walk" and ep.actions[q.step] == open_(a.furniture)
        if q.is_belief:
            has = any(s.object_types[o] == q.obj for o in s.contents[q.container])
            assert truth == ("not inside" if q.qtype == "1.3" else "inside")
            assert has == (q.qtype == "1.1")
        else:
            assert set(q.options) <= set(qa.catalog.GOAL_OBJECT_TYPES) and len(set(q.options)) == 2
        if q.qtype == "2.4":  # the shown grab takes the truth from where both types were known
            a, before = ep.actions[q.step - 1], ep.beliefs[q.step - 1]
            assert a.verb == "grab" and ep.states[q.step - 1].object_types[a.obj] == truth
            here = {s.object_types[o] for o in before.believed_at(before.location[a.obj])}
            assert set(q.options) <= here
            assert q.log_lik[q.answer] > q.log_lik[1 - q.answer]
            line = qa.compact_question(ep, q)
            assert f"| {'ab'[q.answer]} held" in line and f"| {'ba'[q.answer]} here" in line


def test_random_answerer_is_at_chance():
    _, qs = _qa_set()
    for seed in range(3):
        acc = np.mean(qa.random_choices(qs, seed) == np.array([q.answer for q in qs]))
        lo, hi = binomial_band(len(qs))
        assert lo <= acc <= hi, (seed, acc)


def test_reward_is_the_option_likelihood_and_favours_the_truth():
    episodes, qs = _qa_set()
    q = next(q for q in qs if q.is_belief)
    ep = episodes[q.episode]
    t = q.step - 1
    for i, option in enumerate(q.options):
        b = qa.belief_with(ep.states[t], ep.beliefs[t], q.obj, q.container, option == "inside")
        g = qa.option_goal(ep.states[t], ep.beliefs[t], ep.goal, q.obj)
        p = action_distribution(ep.states[t], b, g, ep.params)[ep.actions[t]]
        r = qa.rewards([q], [i])[0]
        assert r == pytest.approx(math.log(max(p, 1e-7)), abs=1e-12)
    r = qa.rewards(qs, [q.answer for q in qs])
    bad = qa.rewards(qs, [-1] * len(qs))
    assert np.all(bad < r) and np.all(bad < qa.rewards(qs, [1 - q.answer for q in qs]))
    table = qa.accuracy_table(qa.reward_choices(qs), qs)
    acc, se, _ = table["overall"]
    assert acc - 3 * se > 0.5  # the label-free reward points at the answer


def test_question_text():
    episodes, qs = _qa_set()
    for q in qs[:12]:
        ep = episodes[q.episode]
        fig = qa.figure_question(ep, q)
        assert fig.startswith("What's inside the apartment:") and "Actions taken by Mary:" in fig
        assert "Please respond with either a or b." in fig and "\\boxed{}" in fig
        line = qa.compact_question(ep, q)
        assert line.split(" | ")[0] == ("belief" if q.is_belief else "goal")
        assert qa.render_question("compact", ep, q) == line
    with pytest.raises(ValueError):
        qa.render_question("image", episodes[0], qs[0])


def test_option_likelihood_survives_a_belief_the_state_contradicts():
    """'A G is inside C' while the human stands at the open C: the planner proposes grabbing
    an object that is not there; the option's likelihood is still defined."""
    episodes, _ = _qa_set()
    for ep in episodes:
        for t in range(1, ep.length):
            a = ep.actions[t - 1]
            if a.verb != "open":
                continue
            s, b, c = ep.states[t], ep.beliefs[t], a.furniture
            kinds = [k for k in qa.catalog.GOAL_OBJECT_TYPES if k in s.object_types
                     and not any(s.object_types[o] == k for o in s.contents[c])]
            fake = qa.belief_with(s, b, kinds[0], c, True)
            goal = qa.option_goal(s, b, ep.goal, kinds[0])
            with pytest.raises(AssertionError):
                action_distribution(s, fake, goal, ep.params)
            p = action_probability(s, fake, goal, ep.actions[t], ep.params)
            assert 0 < p <= 1
            return
    pytest.fail("no episode opens a container")
