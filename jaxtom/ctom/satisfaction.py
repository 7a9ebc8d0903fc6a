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
Phrases match whole words, case-insensitively. Before rule 2, NEUTRALISED_PATTERNS (accepting
phrases that contain a pushback word: "exactly what I needed", "nothing else to change") are
replaced by an acceptance marker, so the paper's order holds for everything else in the reply.
The rules are tuned on the "tune" part of data/satisfaction_replies.jsonl (replies written for
this project) and checked on its "heldout" part (tests/ctom/test_satisfaction.py).
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
    "although", "though", "except", "apart from", "also", "one more thing", "again", "redo",
    "sort", "rename", "replace", "convert", "round", "reorder", "lowercase", "uppercase",
    "not",  # what is left of "not" after the neutralisers is a negation ("not happy with")
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
    "accepted", "approve", "approved", "satisfied", "happy with", "kk", "love it",
    "that's the one", "brilliant", "cool", "reads well", "solid", "no complaints", "well done",
)

# Accepting phrases that contain a pushback word ("exactly what I needed", "nothing else to
# change", "it should work now"). Each match is replaced by an acceptance marker before rule 2,
# so the pushback word inside it does not count, while any OTHER pushback in the reply still
# wins ("exactly what I needed, but add a title" stays Unsatisfied). Negated forms ("not what I
# asked for") are excluded by the look-behinds. Regular expressions, matched case-insensitively.
_NOT = r"(?<!not )(?<!n't )(?<!isn't )"
NEUTRALISED_PATTERNS: tuple[str, ...] = (
    # "exactly what I needed", "the tone I wanted", "does what I need now"
    _NOT + r"\bwhat (?:i|we) (?:need|needed|want|wanted|asked for|meant|had in mind|was after)\b",
    _NOT + r"\bthe (?:tone|length|format|behaviou?r|way|style|answer|result|one) "
           r"(?:i|we) (?:need|needed|want|wanted|asked for|meant|expected|had in mind)\b",
    r"\b(?:(?:covers|has|handles|got|have got|you've got) )?(?:all|everything|all the "
    r"(?:cases|things|points|details|facts))(?: (?:i|we) (?:need|needed|want|wanted|asked for|"
    r"care about))\b",
    r"\b(?:covers|has|handles|got|have got|you've got) everything\b",
    r"\b(?:that|it|this) (?:should|will) (?:work|do it|do|be fine|be good|be right|be ok|be okay)"
    r"(?: now)?\b",
    # "nothing (else) to add/change", "nothing's missing", "nothing I'd change"
    r"\bnothing(?:'s| is)? (?:else |more |further )?(?:to (?:add|change|fix)|needed|missing|"
    r"i'?d change|i would change|wrong)\b",
    r"\bno (?:further |more |other |additional )?(?:changes|edits|requirements?|mistakes|errors|"
    r"problems|issues)(?: needed| from me)?\b",
    r"\bno need to (?:change|add|fix|revise) anything\b",
    r"\bnot bad\b",
    r"\bi have no (?:additional|other|further) requirements?\b",
    # "I don't need anything else", "I can't see anything wrong", "doesn't need any changes"
    r"\b(?:don't|do not|doesn't|does not|can't|cannot|wouldn't|would not) (?:need|have|see|find|"
    r"think of|change) (?:anything|a thing|any (?:more |other |further )?(?:changes|edits|"
    r"problems|issues|mistakes|errors))(?: else| more| wrong| missing| to (?:add|change|fix))?\b",
)


def _pattern(phrases) -> re.Pattern:
    alts = sorted({re.escape(p) for p in phrases}, key=len, reverse=True)
    return re.compile(r"(?<![\w'-])(?:" + "|".join(alts) + r")(?![\w'-])", re.IGNORECASE)


_PUSHBACK = _pattern(PUSHBACK_PHRASES)
_ACCEPT = _pattern(ACCEPTANCE_PHRASES)
_NEUTRAL = re.compile("|".join(f"(?:{p})" for p in NEUTRALISED_PATTERNS), re.IGNORECASE)
_MARK = " ok "  # what a neutralised phrase becomes: an acceptance


def _normalise(text: str) -> str:
    return text.replace("\u2019", "'").replace("\u2018", "'").strip()


def satisfaction_label(predicted_reply: str | None) -> str:
    """'satisfied' or 'unsatisfied' for one predicted reply (None counts as empty)."""
    text = _normalise(predicted_reply or "")
    if not text or END_SIGNAL.lower() in text.lower():
        return "satisfied"
    text = _NEUTRAL.sub(_MARK, text)
    if "?" in text or _PUSHBACK.search(text):
        return "unsatisfied"
    if _ACCEPT.search(text):
        return "satisfied"
    return "unsatisfied"


def is_satisfied(predicted_reply: str | None) -> bool:
    """True when the predicted reply reads as acceptance (the hidden loop stops)."""
    return satisfaction_label(predicted_reply) == "satisfied"
