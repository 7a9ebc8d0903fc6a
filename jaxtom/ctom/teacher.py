"""A label-free teacher for the packing domain's format warm-up (`jaxtom.ctom.tiny`).

It plays both prompts from the context alone, never from the user's hidden needs: it reads the
visible conversation and its own hidden drafts and predictions, as a policy does. What it
teaches is the protocol, not the task:
  * a list names one item per slot (the catalogue of items per slot is public); the first list
    is a guess; a later list keeps the last shown one and acts on every real reply: a named
    item goes into its slot, a slot called wrong or missing gets another random item;
  * CToM mode: plan, decision (COMMIT once the user accepted a shown list, else DRAFT), a
    draft, a prediction of the reply that is a guess worded as the user's disclosure rule
    words a reply (an acceptance, or a mismatch at a random slot not yet settled by a real
    reply: a random item after that slot's cue, or the slot called wrong), and a revision
    that acts on its prediction as a later list acts on a real reply;
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
_CALLED_OUT = re.compile(r"the (\w+) item is (?:wrong|missing)")
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
    """`script(context_text, kind) -> text` for `policies.ScriptedPolicy`; draws from `rng`;
    words its guessed replies by the user's `disclosure` rule (`packing.DISCLOSURES`)."""

    def __init__(self, rng: np.random.Generator, disclosure: str = "mismatch"):
        if disclosure not in packing.DISCLOSURES:
            raise ValueError(f"disclosure must be one of {packing.DISCLOSURES}, "
                             f"got {disclosure!r}")
        self.rng, self.disclosure = rng, disclosure

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

    def _act_on(self, slots: dict[str, str], reply: str) -> dict[str, str]:
        """`slots` changed as `reply` says: a named item into its slot; a slot called wrong or
        missing gets a random item other than the one it holds."""
        slots = dict(slots)
        for item in packing.items_in(reply):
            slots[packing.ITEM_SLOT[item]] = item
        for slot in _CALLED_OUT.findall(reply):
            if slot in packing.SLOTS:
                slots[slot] = self._random_item(slot, avoid=slots.get(slot))
        return slots

    def _complete(self, slots: dict[str, str]) -> dict[str, str]:
        return {s: slots.get(s) or self._random_item(s) for s in packing.SLOT_NAMES}

    def _base_list(self, replies, shown) -> dict[str, str]:
        """The last shown list (a guess at first) acted on by every real reply since."""
        last = shown[-1][len(ANSWER_MARKER):] if shown and shown[-1].startswith(
            ANSWER_MARKER) else (shown[-1] if shown else "")
        slots = self._complete(packing.first_items(last))
        for reply in replies[len(shown) - 1:] if shown else replies:
            slots = self._act_on(slots, reply)
        return slots

    def _guess_reply(self, request: str, draft: dict[str, str], settled: set[str]) -> str:
        """A guessed mismatch at a random open slot, worded as the user would word it."""
        open_slots = [s for s in packing.SLOT_NAMES if s not in settled]
        if not open_slots or self.rng.random() < ACCEPT_PREDICTION:
            return packing.ACCEPT
        slot = open_slots[self.rng.integers(len(open_slots))]
        if self.disclosure == "which":
            return packing.WRONG.format(slot=slot)
        cue = packing.cues_in(request).get(slot, "")
        return packing.NEED.format(needs=f"{cue} {self._random_item(slot, avoid=draft.get(slot))}")

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
            slots = self._complete(packing.first_items(drafts[-1]))
            if predictions:
                slots = self._act_on(slots, predictions[-1])
            return as_list(slots) + P.DRAFT_END
        if kind == "prediction":
            # a slot is settled when a real reply named its item (it is right from then on)
            settled = {packing.ITEM_SLOT[i] for r in replies for i in packing.items_in(r)}
            draft = packing.first_items(drafts[-1] if drafts else "")
            return self._guess_reply(request, draft, settled) + P.PREDICTION_END
        raise ValueError(f"unknown phase kind {kind!r}")
