"""A label-free teacher for the packing domain's format warm-up (`jaxtom.ctom.tiny`).

It plays both prompts from the context alone, never from the user's hidden needs: it reads the
visible conversation and its own hidden drafts and predictions, as a policy does. What it
teaches is the protocol, not the task:
  * a list names one item per slot (the catalogue of items per slot is public); the first list
    is a guess, later lists keep the last shown list and take in every item the user named;
  * CToM mode: plan, decision (COMMIT once the user accepted a shown list, else DRAFT; a fully
    right list ends the conversation before the user could accept it), a draft,
    a prediction of the reply that is a guess (an acceptance, or a random item for every slot
    the user has not settled, each after that slot's cue copied from the request, as the user
    words a need), and each revision puts every predicted item into its slot;
  * direct mode (Prompting Base / Naive GRPO): the list, or `I WANT TO ANSWER:` and the last
    shown list once the user accepted it.
So a model warmed up on it writes the format, revises as its predictions say and uses real
replies, and its predictions say nothing about the user until training teaches them.
"""

from __future__ import annotations

import re

import numpy as np

from jaxtom.ctom import packing
from jaxtom.ctom import protocol as P
from jaxtom.ctom.prompts import ANSWER_MARKER

END_OF_TURN = "<|im_end|>"
_TURN = re.compile(r"<\|im_start\|>(\w+)\n(.*?)(?:<\|im_end\|>|$)", re.DOTALL)
_DRAFT = re.compile(re.escape(P.DRAFT_START) + r"(.*?)" + re.escape(P.DRAFT_END), re.DOTALL)
ACCEPT_PREDICTION = 0.25  # the teacher's share of predicted acceptances


def turns(context: str) -> list[tuple[str, str]]:
    """(role, content) of every chat turn in a Qwen3-format context."""
    return [(m.group(1), m.group(2)) for m in _TURN.finditer(context)]


def as_list(slots: dict[str, str]) -> str:
    """A list as the teacher writes it: each item after its slot's name (`packing.labelled`)."""
    return packing.labelled(slots)


def by_slot(items) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items:
        out.setdefault(packing.ITEM_SLOT[item], item)
    return out


class PackingTeacher:
    """`script(context_text, kind) -> text` for `policies.ScriptedPolicy`; draws from `rng`."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng

    def _random_item(self, slot: str, avoid: str | None = None) -> str:
        options = [item for _, item in packing.SLOTS[slot] if item != avoid]
        return options[self.rng.integers(len(options))]

    def _visible(self, context: str):
        """(opening request, real user replies after it, shown assistant messages)."""
        chat = turns(context)
        users = [c for r, c in chat if r == "user" and not c.startswith(P.ANTICIPATED)]
        shown = [c.strip() for r, c in chat if r == "assistant" and c.strip()
                 and "[" not in c]
        return (users[0] if users else ""), users[1:], shown

    def _base_list(self, replies, shown) -> dict[str, str]:
        """The last shown list (a guess at first) with every item the user named taken in."""
        last = shown[-1][len(ANSWER_MARKER):] if shown and shown[-1].startswith(
            ANSWER_MARKER) else (shown[-1] if shown else "")
        slots = by_slot(packing.items_in(last))
        for slot in packing.SLOT_NAMES:
            slots.setdefault(slot, self._random_item(slot))
        for reply in replies:
            for item in packing.items_in(reply):
                slot = packing.ITEM_SLOT[item]
                dropped = "do not need" in reply
                slots[slot] = self._random_item(slot, avoid=item) if dropped else item
        return slots

    def __call__(self, context: str, kind: str) -> str:
        request, replies, shown = self._visible(context)
        accepted = bool(shown) and bool(replies) and replies[-1].strip() == packing.ACCEPT
        if kind == "response":  # direct mode
            listed = as_list(self._base_list(replies, shown))
            return (f"{ANSWER_MARKER} {listed}" if accepted else listed) + END_OF_TURN
        if kind == "plan":
            return ("i will commit ." if accepted else "i will draft .") + P.PLAN_END
        if kind == "decision":
            return "C" if accepted else "A"
        if kind == "ask":
            return "what do you need ?" + P.ASK_END
        round_part = context.rsplit(P.PLAN_START, 1)[-1]
        drafts = _DRAFT.findall(round_part)
        predictions = [c for r, c in turns(round_part) if r == "user"
                       and c.startswith(P.ANTICIPATED)]
        if kind == "draft":
            if not drafts:  # d(0): from the visible conversation
                return as_list(self._base_list(replies, shown)) + P.DRAFT_END
            slots = by_slot(packing.items_in(drafts[-1]))
            for item in packing.items_in(predictions[-1]) if predictions else []:
                slots[packing.ITEM_SLOT[item]] = item
            for slot in packing.SLOT_NAMES:
                slots.setdefault(slot, self._random_item(slot))
            return as_list(slots) + P.DRAFT_END
        if kind == "prediction":
            if self.rng.random() < ACCEPT_PREDICTION:
                return packing.ACCEPT + P.PREDICTION_END
            slots = by_slot(packing.items_in(drafts[-1] if drafts else ""))
            confirmed = {packing.ITEM_SLOT[i] for r in replies if "do not need" not in r
                         for i in packing.items_in(r)}
            open_slots = [s for s in packing.SLOT_NAMES if s not in confirmed]
            if not open_slots:
                return packing.ACCEPT + P.PREDICTION_END
            cues = packing.cues_in(request)
            needs = " ".join(f"{cues.get(s, '')} {self._random_item(s, avoid=slots.get(s))}"
                             for s in open_slots)
            return packing.NEED.format(needs=needs) + P.PREDICTION_END
        raise ValueError(f"unknown phase kind {kind!r}")
