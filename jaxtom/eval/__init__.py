"""Evaluation metrics shared across papers: means with clustered standard errors, goal
calibration (top-1, log score, Brier, KL from the exact posterior), accuracy by progress."""

from jaxtom.eval.metrics import (
    accuracy_by_progress, cluster_mean_sem, cluster_means, goal_scores, mean_sem,
    paired_difference, plot_accuracy_by_progress, smooth,
)

__all__ = ["accuracy_by_progress", "cluster_mean_sem", "cluster_means", "goal_scores",
           "mean_sem", "paired_difference", "plot_accuracy_by_progress", "smooth"]
