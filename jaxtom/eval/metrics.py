"""Metrics shared by the evaluations: means with (episode-clustered) standard errors, goal
calibration against the exact posterior, accuracy by task progress.

Timesteps of one episode are correlated, so standard errors are taken over per-episode means
(cluster-robust in the simplest form); comparisons between methods use the paired per-episode
difference, which is what a "> 2 SE" claim should rest on.
"""

from __future__ import annotations

import numpy as np


def mean_sem(values) -> tuple[float, float]:
    """Mean and standard error of independent values (SE 0 for fewer than 2)."""
    v = np.asarray(values, np.float64).reshape(-1)
    if v.size == 0:
        raise ValueError("mean_sem of an empty set")
    sem = float(v.std(ddof=1) / np.sqrt(v.size)) if v.size > 1 else 0.0
    return float(v.mean()), sem


def cluster_means(values, clusters) -> np.ndarray:
    """Per-cluster means, clusters in sorted order."""
    values, clusters = np.asarray(values, np.float64), np.asarray(clusters)
    if values.shape != clusters.shape:
        raise ValueError(f"values {values.shape} and clusters {clusters.shape} must match")
    return np.array([values[clusters == c].mean() for c in np.unique(clusters)])


def cluster_mean_sem(values, clusters) -> tuple[float, float]:
    """Mean over clusters (episodes) of per-cluster means, and its standard error."""
    return mean_sem(cluster_means(values, clusters))


def paired_difference(a, b, clusters) -> tuple[float, float]:
    """Mean and SE of per-cluster (a - b): the margin of method a over method b."""
    return mean_sem(cluster_means(np.asarray(a) - np.asarray(b), clusters))


def smooth(q, mix: float) -> np.ndarray:
    """(1 - mix) q + mix / G: a particle set is sparse, so scores need a floor."""
    q = np.asarray(q, np.float64)
    if not 0.0 <= mix < 1.0:
        raise ValueError(f"mix must be in [0, 1), got {mix}")
    return (1.0 - mix) * q + mix / q.shape[-1]


def goal_scores(q, true_goal, exact, mix: float = 0.01) -> dict[str, np.ndarray]:
    """Per-row scores of goal distributions q [M, G] (rows sum to 1, or are all zero for a
    failed query) against the true goals [M] and the exact posterior [M, G]: top-1 accuracy,
    log score and Brier score of the true goal, and KL(exact || q). Top-1 splits credit
    evenly among tied top goals.

    A failed query has no mass on any goal: top-1 0, the floor's log score and KL (as the
    household evaluation scores it), and Brier 2, the worst any distribution scores. Scored as
    a uniform guess, an answer that failed would beat every well-formed wrong one, and a
    policy whose answers all fail would look better than one that answers."""
    q = np.asarray(q, np.float64)
    empty = q.sum(-1, keepdims=True) <= 0
    q = q / np.where(empty, 1.0, q.sum(-1, keepdims=True))
    rows = np.arange(len(q))
    true_goal = np.asarray(true_goal)
    onehot = np.zeros_like(q)
    onehot[rows, true_goal] = 1.0
    qs = smooth(q, mix)
    exact = np.asarray(exact, np.float64)
    kl = np.sum(np.where(exact > 0, exact * (np.log(np.maximum(exact, 1e-300)) - np.log(qs)),
                         0.0), axis=-1)
    # ties at the top share the credit (the accuracy of breaking them at random), so a belief
    # that splits mass evenly is not scored by the arbitrary order of goal indices
    best = np.isclose(q, q.max(-1, keepdims=True), rtol=1e-9, atol=0.0)
    top1 = np.where(empty[:, 0], 0.0, best[rows, true_goal] / best.sum(-1))
    brier = np.where(empty[:, 0], 2.0, np.sum((q - onehot) ** 2, -1))
    return {"top1": top1.astype(np.float64), "log_score": np.log(qs[rows, true_goal]),
            "brier": brier, "kl_exact": kl}


def accuracy_by_progress(progress, correct, bins: int = 10) -> tuple[np.ndarray, np.ndarray]:
    """Bin centres and mean accuracy per bin of task progress in [0, 1] (NaN if empty)."""
    progress, correct = np.asarray(progress, np.float64), np.asarray(correct, np.float64)
    edges = np.linspace(0.0, 1.0, bins + 1)
    which = np.clip(np.digitize(progress, edges) - 1, 0, bins - 1)
    acc = np.array([correct[which == b].mean() if np.any(which == b) else np.nan
                    for b in range(bins)])
    return (edges[:-1] + edges[1:]) / 2, acc


def plot_accuracy_by_progress(curves: dict[str, tuple], path, title: str = "") -> None:
    """PNG of goal accuracy vs task progress, one line per method (Figure 5a)."""
    import matplotlib  # heavy: only the plots need it
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # heavy: only the plots need it
    fig, ax = plt.subplots(figsize=(5, 3.5))
    for name, (x, y) in curves.items():
        ax.plot(x, y, marker="o", lw=2.5 if name.startswith("MindZero") else 1.2,
                ls="-" if name.startswith("MindZero") else "--", label=name)
    ax.set_xlabel("task progress")
    ax.set_ylabel("goal accuracy (top-1)")
    ax.set_ylim(0, 1)
    ax.set_title(title)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
