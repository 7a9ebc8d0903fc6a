"""Reading a binary-choice answer: which of the letters (a) / (b) a model's text picks.

Shared by both domains' question answering (MindZero's gridworld QA, the household's
MMToM-style questions), so it lives with the evaluation code rather than in either."""

from __future__ import annotations

import re

_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
_CHOICE = re.compile(r"(?<![a-z0-9])\(?([ab])\)?(?![a-z0-9])")
_MARKED = re.compile(r"\(([a-z])\)|(?<![a-z0-9])([a-z])\)")  # "(c)" or "c)": an option marker


def parse_answer(text, labels: tuple[str, str] | None = None) -> int:
    """0 for (a), 1 for (b), -1 when the answer is not exactly one of the two letters.

    Lenient about wrapping: case, brackets, a trailing period, a lead-in ("Answer: b") and the
    option's name after the letter. Unparseable: no letter, both letters ("a or b"), a marked
    letter other than a/b ("(c)"), an unclosed <think>, and, with `labels` (the options' names
    in order), naming only the other option. Never raises on model output."""
    if not isinstance(text, str):
        return -1
    text = _THINK.sub(" ", text).lower()
    if "<think>" in text:
        return -1
    if any((m.group(1) or m.group(2)) not in "ab" for m in _MARKED.finditer(text)):
        return -1
    letters = {m.group(1) for m in _CHOICE.finditer(text)}
    if len(letters) != 1:
        return -1
    choice = "ab".index(letters.pop())
    if labels is not None:
        named = [label.lower() in text for label in labels]
        if named[1 - choice] and not named[choice]:
            return -1
    return choice


__all__ = ["parse_answer"]
