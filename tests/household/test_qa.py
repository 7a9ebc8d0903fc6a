import numpy as np
import pytest

from jaxtom.household.qa_answers import accuracy_by_type, binomial_band, parse_answer


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
