import numpy as np
import pytest

from jaxtom.eval import (
    accuracy_by_progress, cluster_mean_sem, goal_scores, mean_sem, paired_difference, smooth,
)


def test_mean_sem():
    m, se = mean_sem([1.0, 2.0, 3.0, 4.0])
    assert m == 2.5 and se == pytest.approx(np.std([1, 2, 3, 4], ddof=1) / 2)
    with pytest.raises(ValueError):
        mean_sem([])


def test_clusters_and_pairs():
    values = np.array([1.0, 1.0, 1.0, 0.0, 0.0])
    clusters = np.array([0, 0, 0, 1, 1])
    assert cluster_mean_sem(values, clusters)[0] == 0.5  # episodes weigh equally
    d, se = paired_difference(values, np.zeros(5), clusters)
    assert d == 0.5 and se == pytest.approx(0.5)


def test_goal_scores():
    exact = np.array([[0.5, 0.5, 0.0, 0.0], [0.0, 0.0, 1.0, 0.0]])
    q = np.array([[1.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])  # second row: a failed parse
    s = goal_scores(q, np.array([0, 2]), exact, mix=0.2)
    assert s["top1"].tolist() == [1.0, 0.0]
    assert s["log_score"][0] == pytest.approx(np.log(0.8 + 0.05))
    # a failed parse scores as the worst answer, never above a well-formed wrong one
    assert s["log_score"][1] == pytest.approx(np.log(0.05))
    assert s["brier"][0] == 0.0 and s["brier"][1] == 2.0
    assert s["kl_exact"][1] == pytest.approx(np.log(1.0 / 0.05))
    wrong = goal_scores(np.array([[0.0, 1.0, 0.0, 0.0]]), np.array([2]), exact[1:], mix=0.2)
    assert all(wrong[k][0] >= s[k][1] for k in ("log_score", "top1"))
    assert all(wrong[k][0] <= s[k][1] for k in ("brier", "kl_exact"))
    kl0 = 0.5 * np.log(0.5 / 0.85) + 0.5 * np.log(0.5 / 0.05)
    assert s["kl_exact"][0] == pytest.approx(kl0)
    assert goal_scores(exact, [0, 2], exact, mix=0.0)["kl_exact"] == pytest.approx([0, 0])
    assert smooth(np.eye(4)[:1], 0.0).tolist() == [[1, 0, 0, 0]]
    tied = np.array([[0.5, 0.5, 0.0, 0.0], [0.5, 0.5, 0.0, 0.0], [0.0, 0.4, 0.3, 0.3]])
    assert goal_scores(tied, [1, 2, 2], tied)["top1"].tolist() == [0.5, 0.0, 0.0]


def test_accuracy_by_progress():
    x, acc = accuracy_by_progress([0.05, 0.15, 0.16, 0.95], [1, 0, 1, 1], bins=10)
    assert len(x) == 10 and acc[0] == 1.0 and acc[1] == 0.5 and np.isnan(acc[5])
