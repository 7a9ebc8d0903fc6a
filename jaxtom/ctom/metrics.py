"""The paper's evaluation metrics (appendix B): lexical prediction F1 with its pairing rules
(eq. 9, B.5), task-clustered SEM (eq. 10), self-revision gain (eq. 8), action shares and the
table 1/2 effort summaries. Plain Python over plain records: no model, no simulator."""

from __future__ import annotations

import math
import re
import unicodedata
from typing import Iterable, Mapping, Sequence


def word_set(text: str | None) -> set[str]:
    """W(x): distinct words after lowercasing, removing punctuation, splitting on whitespace."""
    if not text:
        return set()
    kept = "".join(c for c in text.lower() if not unicodedata.category(c).startswith("P"))
    return set(kept.split())


def lexical_f1(predicted: str | None, observed: str | None) -> float:
    """2|W(p) & W(o)| / (|W(p)| + |W(o)|), 0 if either word set is empty (eq. 9)."""
    p, o = word_set(predicted), word_set(observed)
    if not p or not o:
        return 0.0
    return 2.0 * len(p & o) / (len(p) + len(o))


def conversation_f1(predictions: Sequence[str | None], replies: Sequence[str | None]) -> float | None:
    """Coding/writing pairing (B.5): round t pairs its prediction slot with the reply to it.

    `predictions[t]` is the last prediction of visible round t (None: no slot, i.e. an ASK or
    COMMIT round; "" an empty prediction, which scores 0); `replies[t]` the user's reply to
    round t (None: no reply, e.g. the final round). Returns the mean F1 over pairs, or None
    when the conversation has no pair and is excluded.
    """
    if len(predictions) != len(replies):
        raise ValueError(f"need one reply slot per round: {len(predictions)} predictions, "
                         f"{len(replies)} replies")
    scores = [lexical_f1(p, r) for p, r in zip(predictions, replies)
              if p is not None and r is not None]
    return sum(scores) / len(scores) if scores else None


def math_conversation_f1(predictions: Sequence[str | None], user_messages: Sequence[str | None]) -> float:
    """Math pairing (B.5): the first m = min(|u_hat|, |u| - 1) recorded predictions and the
    user messages after the opening request, in order; empty ones score 0, m = 0 scores 0."""
    m = min(len(predictions), len(user_messages) - 1)
    if m <= 0:
        return 0.0
    return sum(lexical_f1(predictions[i], user_messages[i + 1]) for i in range(m)) / m


def clustered_mean_sem(scores_by_task: Mapping[object, Sequence[float]] | Sequence[Sequence[float]]
                       ) -> tuple[float, float]:
    """(M, SEM(M)) of eq. 10: tasks are clusters, conversations within a task may correlate.

    Tasks with no eligible conversation are dropped. SEM is nan with fewer than two tasks.
    """
    groups = list(scores_by_task.values()) if isinstance(scores_by_task, Mapping) else list(
        scores_by_task)
    groups = [[float(x) for x in g] for g in groups if len(g)]
    if not groups:
        raise ValueError("clustered SEM needs at least one task with at least one score")
    S = [sum(g) for g in groups]
    n = [len(g) for g in groups]
    total = sum(n)
    M = sum(S) / total
    C = len(groups)
    if C < 2:
        return M, float("nan")
    var = C / (C - 1) * sum((s - M * k) ** 2 for s, k in zip(S, n))
    return M, math.sqrt(var) / total


def clustered_sem(scores_by_task) -> float:
    """Task-clustered standard error of the pooled mean (eq. 10)."""
    return clustered_mean_sem(scores_by_task)[1]


def self_revision_gain(score_changes: Iterable[tuple[float, float]]) -> tuple[float, float]:
    """Delta_rev (eq. 8) and its SEM over revised rounds: pairs (s(d^(0)), s(d^(K))).

    Returns (100 * mean(final - initial), 100 * sample std / sqrt(|R|)); (nan, nan) for none.
    """
    diffs = [100.0 * (float(b) - float(a)) for a, b in score_changes]
    if not diffs:
        return float("nan"), float("nan")
    mean = sum(diffs) / len(diffs)
    if len(diffs) < 2:
        return mean, float("nan")
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1))
    return mean, sd / math.sqrt(len(diffs))


def action_shares(actions: Iterable[str]) -> dict[str, float]:
    """Pooled percentages of recorded ASK / DRAFT / COMMIT decisions (table 6)."""
    counts = {"ASK": 0, "DRAFT": 0, "COMMIT": 0}
    for a in actions:
        if a in counts:
            counts[a] += 1
    total = sum(counts.values())
    return {k: (100.0 * v / total if total else 0.0) for k, v in counts.items()}


_WS = re.compile(r"\s+")


def user_effort(conversations: Iterable[tuple[object, Sequence[int]]]) -> dict[str, float]:
    """Table 2: replies and reply tokens per conversation with at least one user reply.

    Each item is (task id, token lengths of the user's replies after the opening request).
    Returns means and task-clustered SEMs; conversations with no reply are left out.
    """
    replies: dict[object, list[float]] = {}
    tokens: dict[object, list[float]] = {}
    for task, lengths in conversations:
        if len(lengths) == 0:
            continue
        replies.setdefault(task, []).append(float(len(lengths)))
        tokens.setdefault(task, []).append(float(sum(lengths)))
    if not replies:
        return {"conversations": 0, "replies": float("nan"), "replies_sem": float("nan"),
                "tokens": float("nan"), "tokens_sem": float("nan")}
    r, r_sem = clustered_mean_sem(replies)
    t, t_sem = clustered_mean_sem(tokens)
    return {"conversations": sum(map(len, replies.values())), "replies": r,
            "replies_sem": r_sem, "tokens": t, "tokens_sem": t_sem}
