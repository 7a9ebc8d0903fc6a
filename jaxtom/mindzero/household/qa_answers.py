"""Reading and scoring answers to household binary questions (MMToM-QA style, Table 4b).

- `parse_answer`: lenient about the wrapping (`a`, `(b)`, `\\boxed{a}`, `Answer: b.`), strict
  about the choice: both letters or neither is unparseable (-1). Reasoning inside
  `<think>`/`<thinking>` tags is ignored (Figure 8's instruction asks for it), and when the
  text has `\\boxed{...}` only the boxed part counts, so "a" as an article in free text does
  not become a choice. Never raises on model output.
- `accuracy_by_type`: accuracy per question type and overall, SE clustered by episode.
- `binomial_band`: the two-sided band a random answerer's accuracy falls in.
"""

from __future__ import annotations

import math
import re

import numpy as np

from jaxtom.eval import metrics
from jaxtom.eval.answers import parse_answer as _parse_letters

_THINK = re.compile(r"<(think|thinking)>.*?</\1>", re.DOTALL | re.IGNORECASE)
_OPEN = re.compile(r"<(think|thinking)>", re.IGNORECASE)
_BOXED = re.compile(r"\\boxed\s*\{([^{}]*)\}")


def parse_answer(text, labels: tuple[str, str] | None = None) -> int:
    """0 for (a), 1 for (b), -1 when the answer is not exactly one of the two letters."""
    if not isinstance(text, str):
        return -1
    text = _THINK.sub(" ", text)
    if _OPEN.search(text):  # an unclosed reasoning block: no final answer yet
        return -1
    boxed = _BOXED.findall(text)
    if boxed:
        choices = {_parse_letters(b, labels) for b in boxed}
        return choices.pop() if len(choices) == 1 else -1
    if "\\boxed" in text:  # a malformed box
        return -1
    return _parse_letters(text, labels)


def accuracy_by_type(choices, answers, kinds, episodes, types=None) -> dict:
    """{type: (accuracy, SE, n)} and 'overall'; SE over per-episode means (clustered);
    an unparseable choice (-1) is wrong."""
    choices, answers = np.asarray(choices), np.asarray(answers)
    kinds, episodes = np.asarray(kinds), np.asarray(episodes)
    if not (len(choices) == len(answers) == len(kinds) == len(episodes)) or not len(choices):
        raise ValueError(f"need equal, non-empty choices/answers/kinds/episodes, got "
                         f"{len(choices)}/{len(answers)}/{len(kinds)}/{len(episodes)}")
    correct = (choices == answers).astype(float)
    out = {}
    for kind in (types if types is not None else sorted(set(kinds.tolist()))):
        m = kinds == kind
        if m.any():
            acc, se = metrics.cluster_mean_sem(correct[m], episodes[m])
            out[kind] = (acc, se, int(m.sum()))
    acc, se = metrics.cluster_mean_sem(correct, episodes)
    out["overall"] = (acc, se, len(correct))
    return out


def binomial_band(n: int, p: float = 0.5, z: float = 3.0) -> tuple[float, float]:
    """p +- z binomial SEs of a proportion over n independent answers."""
    half = z * math.sqrt(p * (1 - p) / n)
    return p - half, p + half


__all__ = ["accuracy_by_type", "binomial_band", "parse_answer"]
