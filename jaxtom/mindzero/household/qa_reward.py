"""The household QA answer reward (the public `rewards/hh_tom.py`):
`qa_reward(log_lik_chosen, choice)` = `log max(P(last action | the chosen option's belief and
goal), 1e-7)`; an unparseable answer (choice -1) gets `log(1e-7) - 1`, strictly below any real
answer. (The household ELBO, MindZero's use of the environment, is
`jaxtom.mindzero.household.reward`.)"""

from __future__ import annotations

import math

import numpy as np

QA_FLOOR = 1e-7


def clean_scores(x: np.ndarray) -> np.ndarray:
    """NaN -> -inf (p = 0), +inf -> 0 (p = 1)."""
    return np.nan_to_num(x, nan=-np.inf, posinf=0.0, neginf=-np.inf)


def qa_reward(log_lik_chosen, choice, *, floor: float = QA_FLOOR) -> np.ndarray:
    """[B] `log max(P(last action | chosen option), floor)`; choice -1 (unparseable) gets
    `log(floor) - 1`. `log_lik_chosen` [B] is the log-likelihood under the chosen option
    (any value where choice is -1)."""
    if not 0.0 < floor < 1.0:
        raise ValueError(f"floor must be in (0, 1), got {floor}")
    ll = clean_scores(np.asarray(log_lik_chosen, np.float64))
    choice = np.asarray(choice)
    if ll.shape != choice.shape:
        raise ValueError(f"log_lik_chosen {ll.shape} and choice {choice.shape} differ")
    return np.where(choice >= 0, np.maximum(ll, math.log(floor)), math.log(floor) - 1.0)
