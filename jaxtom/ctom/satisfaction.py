"""The fixed lexical satisfaction classifier g of CToM appendix A.3.

It reads only the *predicted* user reply (never the draft or the answer) and decides whether
the hidden draft loop stops (Satisfied) or revises (Unsatisfied). It is not learned. Every
phrase list lives here, in one place, so that a change to the rules is one reviewable diff.

Rules, applied in this order:
  1. empty (after stripping) or the end-of-conversation signal  -> Satisfied
  2. any pushback: a question mark, or a PUSHBACK_PHRASES match   -> Unsatisfied
  3. a clear acceptance: an ACCEPTANCE_PHRASES match              -> Satisfied
  4. anything else (e.g. an imperative correction with no listed word) -> Unsatisfied
Rule 4 is our choice where the paper is silent: a reply that is not clearly an acceptance is
treated as feedback, which is what the simulators send whenever something is missing.
Phrases match whole words, case-insensitively; NEUTRALISED_PHRASES are removed before the
pushback check because they contain a pushback word while accepting ("nothing to add").
"""

from __future__ import annotations

import re

END_SIGNAL = "[[TERMINATE CHAT]]"

PUSHBACK_PHRASES: tuple[str, ...] = (
    # the paper's examples
    "wrong", "still", "double-check", "double check", "could you", "add", "instead",
    # corrections and doubt
    "incorrect", "not right", "not correct", "not quite", "not sure", "unsure", "mistake",
    "error", "typo", "off by", "recheck", "re-check", "check again", "verify", "doubt",
    "doesn't", "does not", "isn't", "is not", "aren't", "don't", "didn't", "won't", "can't",
    "shouldn't", "wasn't", "not what", "hmm", "hm", "wait", "actually", "but", "however",
    "although", "though",
    # requests for change
    "can you", "would you", "please", "should", "must", "need", "needs", "needed", "missing",
    "missed", "forgot", "forget", "include", "mention", "remove", "drop", "change", "fix",
    "rewrite", "revise", "shorten", "shorter", "longer", "expand", "too long", "too short",
    "too much", "too many", "too few", "too vague", "too formal", "too casual", "more detail",
    "more details", "more specific", "less", "explain", "clarify", "handle", "raise",
    "return", "make it", "use a", "use the", "rather",
    "i wanted", "i asked", "i said", "i meant", "i need", "i'd like", "i would like",
)

ACCEPTANCE_PHRASES: tuple[str, ...] = (
    "ok", "okay", "k", "yes", "yep", "yeah", "correct", "right", "that's right",
    "looks good", "look good", "looks great", "good", "great", "perfect", "excellent",
    "thanks", "thank you", "exactly", "matches", "spot on", "lgtm", "fine", "works",
    "all set", "done", "agreed", "nice", "awesome", "that's it", "got it", "sounds good",
    "accepted", "approve", "approved", "satisfied", "happy with",
)

# Accepting phrases that contain a pushback word; removed before rule 2.
NEUTRALISED_PHRASES: tuple[str, ...] = (
    "nothing to add", "nothing else to add", "nothing more to add", "no need to change",
    "no changes needed", "no further changes", "no more changes", "nothing is missing",
    "nothing missing", "no additional requirement", "i have no additional requirement",
    "don't need anything else", "do not need anything else", "no mistakes", "no errors",
)


def _pattern(phrases) -> re.Pattern:
    alts = sorted({re.escape(p) for p in phrases}, key=len, reverse=True)
    return re.compile(r"(?<![\w'-])(?:" + "|".join(alts) + r")(?![\w'-])", re.IGNORECASE)


_PUSHBACK = _pattern(PUSHBACK_PHRASES)
_ACCEPT = _pattern(ACCEPTANCE_PHRASES)
_NEUTRAL = _pattern(NEUTRALISED_PHRASES)


def _normalise(text: str) -> str:
    return text.replace("\u2019", "'").replace("\u2018", "'").strip()


def satisfaction_label(predicted_reply: str | None) -> str:
    """'satisfied' or 'unsatisfied' for one predicted reply (None counts as empty)."""
    text = _normalise(predicted_reply or "")
    if not text or END_SIGNAL.lower() in text.lower():
        return "satisfied"
    text = _NEUTRAL.sub(" ", text)
    if "?" in text or _PUSHBACK.search(text):
        return "unsatisfied"
    if _ACCEPT.search(text):
        return "satisfied"
    return "unsatisfied"


def is_satisfied(predicted_reply: str | None) -> bool:
    """True when the predicted reply reads as acceptance (the hidden loop stops)."""
    return satisfaction_label(predicted_reply) == "satisfied"
