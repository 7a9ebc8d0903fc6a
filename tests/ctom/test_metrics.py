"""Metrics, effort cost and task scores against hand-computed values."""

import math

import numpy as np
import pytest

from jaxtom import ctom
from jaxtom.ctom import (clustered_mean_sem, clustered_sem, combined_reward, effort_cost,
                         lexical_f1, rouge_l_f1, score_math)
from jaxtom.ctom.metrics import (action_shares, conversation_f1, math_conversation_f1,
                                 self_revision_gain, user_effort, word_set)


def test_effort_cost_hand_values():
    # math: N=4, B_u=332, B_a=1024; 2 user turns, 166 user tokens, 2048 assistant tokens
    c = effort_cost(2, 166, 2048, N=4, B_u=332, B_a=1024)
    assert c == pytest.approx(0.5 * 0.5 + 0.1 * 0.5 + 0.4 * 1.0)
    assert effort_cost(0, 0, 0, N=6, B_u=2000, B_a=900) == 0.0
    assert effort_cost(6, 10 ** 6, 10 ** 6, N=6, B_u=2000, B_a=900) == pytest.approx(1.0)
    assert effort_cost(1, 100, 300, N=6, B_u=2000, B_a=600, alpha=0.2, beta=0.3) == \
        pytest.approx(0.2 / 6 + 0.5 * 0.05 + 0.3 * 0.5)
    with pytest.raises(ValueError, match="alpha"):
        effort_cost(1, 1, 1, N=4, B_u=1, B_a=1, alpha=0.8, beta=0.4)
    with pytest.raises(ValueError, match="positive"):
        effort_cost(1, 1, 1, N=0, B_u=1, B_a=1)


def test_combined_reward_and_table4():
    assert combined_reward(1.0, 0.5) == pytest.approx(0.995)
    assert combined_reward(0.3, 0.5, w_effort=0.0) == pytest.approx(0.3)
    m, c, w = ctom.DOMAINS["math"], ctom.DOMAINS["coding"], ctom.DOMAINS["writing"]
    assert (m.max_rounds, m.user_budget, m.assistant_budget) == (4, 332, 1024)
    assert (c.max_rounds, c.user_budget, c.assistant_budget) == (6, 2000, 600)
    assert (w.draft_cap, w.prediction_cap, w.revision_cap) == (1536, 256, 1536)
    with pytest.raises(ValueError, match="unknown domain"):
        ctom.domain_settings("poetry")


def test_lexical_f1_hand_values():
    assert word_set("Hello, hello WORLD!") == {"hello", "world"}
    # W(p) = {the, answer, is, wrong}, W(o) = {the, answer, looks, right}: 2*2/(4+4)
    assert lexical_f1("The answer is wrong.", "the answer looks right") == pytest.approx(0.5)
    assert lexical_f1("", "ok") == 0.0
    assert lexical_f1("...", "ok") == 0.0  # punctuation only: empty word set
    assert lexical_f1("ok ok ok", "OK!") == 1.0


def test_pairing_rules():
    # coding/writing: ASK round (no slot) and final unanswered prediction excluded
    preds = [None, "add a title", "", "looks good"]
    replies = ["fine", "add a title please", "wrong date", None]
    f = conversation_f1(preds, replies)
    assert f == pytest.approx((2 * 3 / (3 + 4) + 0.0) / 2)
    assert conversation_f1([None, "x"], ["a", None]) is None
    # math: m = min(|u_hat|, |u| - 1)
    assert math_conversation_f1(["is it right"], ["solve this"]) == 0.0  # m = 0, kept as 0
    assert math_conversation_f1(["wrong", "ok"], ["q", "wrong", "ok", "extra"]) == 1.0
    assert math_conversation_f1(["wrong", "", "x"], ["q", "wrong", "ok"]) == pytest.approx(0.5)


def test_clustered_sem_equal_sizes_is_std_of_task_means():
    rng = np.random.default_rng(0)
    scores = {f"t{c}": rng.random(8).tolist() for c in range(7)}
    means = np.array([np.mean(v) for v in scores.values()])
    assert clustered_sem(scores) == pytest.approx(means.std(ddof=1) / math.sqrt(7))
    M, _ = clustered_mean_sem(scores)
    assert M == pytest.approx(np.mean(list(scores.values())))


def test_clustered_sem_unequal_sizes_hand_value():
    # tasks: [1, 0] (S=1, n=2) and [1] (S=1, n=1): M = 2/3
    # SEM = sqrt(2 * ((1 - 4/3)^2 + (1 - 2/3)^2)) / 3 = sqrt(2 * 2/9) / 3
    assert clustered_sem([[1, 0], [1]]) == pytest.approx(math.sqrt(4 / 9) / 3)
    assert math.isnan(clustered_sem([[1, 0]]))
    with pytest.raises(ValueError):
        clustered_sem({})


def test_self_revision_gain_and_action_shares():
    d, sem = self_revision_gain([(0, 1), (0, 0), (1, 1), (1, 0)])
    assert d == 0.0 and sem == pytest.approx(np.std([100, 0, 0, -100], ddof=1) / 2)
    assert action_shares(["ASK", "DRAFT", "DRAFT", "COMMIT", "bogus"]) == {
        "ASK": 25.0, "DRAFT": 50.0, "COMMIT": 25.0}


def test_user_effort_skips_conversations_without_replies():
    out = user_effort([("a", [10, 20]), ("a", []), ("b", [5])])
    assert out["conversations"] == 2
    assert out["replies"] == pytest.approx(1.5) and out["tokens"] == pytest.approx(17.5)


@pytest.mark.parametrize("response,reference,want", [
    (r"so \boxed{\frac{1}{2}}", "0.5", 1.0), (r"\boxed{\dfrac12}", r"\frac{1}{2}", 1.0),
    (r"\boxed{3} then \boxed{4}", "4", 1.0), (r"\boxed{3} then \boxed{4}", "3", 0.0),
    ("the answer is 4", "4", 0.0), (r"\boxed{x = 3}", "3", 1.0), (r"\boxed{2\sqrt{3}}", r"\sqrt{12}", 1.0),
    (r"\boxed{1,000}", "1000", 1.0), (r"\boxed{\{", "3", 0.0), (r"\boxed{}", "3", 0.0),
    (r"\boxed{\text{(B)}}", r"\text{(B)}", 1.0), (r"\boxed{7}", r"The total is $\boxed{7}$.", 1.0),
    (None, "1", 0.0), (r"\boxed{\pi/2}", r"\frac{\pi}{2}", 1.0),
])
def test_score_math(response, reference, want):
    assert score_math(response, reference) == want


def test_rouge_l_hand_values():
    # LCS("the cat sat on the mat", "the cat is on the mat") = 5; P = 5/6, R = 5/6
    assert rouge_l_f1("The cat sat on the mat.", "the cat is on the mat") == pytest.approx(5 / 6)
    # LCS = 2 ("a c"), P = 2/3, R = 2/4 -> F = 2PR/(P+R) = 4/7
    assert rouge_l_f1("a b c", "a c d e") == pytest.approx(4 / 7)
    assert rouge_l_f1("", "x") == 0.0 and rouge_l_f1("x", "y") == 0.0
    assert rouge_l_f1("Same text.", "same TEXT") == 1.0
