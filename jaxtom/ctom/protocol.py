"""The CToM protocol: tags, chat-template glue and token segments with a policy mask.

A round's token sequence is the rendered visible history h_t (system prompt + visible turns,
through the model's chat template) followed by alternating segments: text the controller
inserts (opening tags, turn headers; mask 0) and text the policy samples (plan, decision,
drafts, questions, predictions, each with its closing tag; mask 1). `Segments` keeps the two
apart so the GRPO mask is exact (appendix A.1).
"""

from __future__ import annotations

import dataclasses
import re

PLAN_START, PLAN_END = "[PLAN_START]", "[PLAN_END]"
DECISION = "[DECISION]"
DRAFT_START, DRAFT_END = "[DRAFT_START]", "[DRAFT_END]"
ASK_START, ASK_END = "[ASK_START]", "[ASK_END]"
ANTICIPATED, PREDICTION_END = "[ANTICIPATED]", "[PREDICTION_END]"
TAGS = (PLAN_START, PLAN_END, DECISION, DRAFT_START, DRAFT_END, ASK_START, ASK_END,
        ANTICIPATED, PREDICTION_END)
DECISIONS = {"A": "DRAFT", "B": "ASK", "C": "COMMIT"}


def parse_decision(text: str) -> str | None:
    """'DRAFT' | 'ASK' | 'COMMIT' from the categorical character (or the word); None if
    malformed."""
    s = (text or "").strip().upper()
    if not s:
        return None
    for word in ("DRAFT", "ASK", "COMMIT"):
        if s.startswith(word):
            return word
    return DECISIONS.get(s[0])


_TAG_RE = re.compile("|".join(re.escape(t) for t in TAGS))


def strip_phase(text: str, closing: str) -> str:
    """A phase's content: cut at its closing tag, drop stray tags, trim whitespace."""
    text = text.split(closing, 1)[0]
    return _TAG_RE.sub("", text).strip()


@dataclasses.dataclass
class ChatGlue:
    """The chat template's transitions, found by rendering probe messages once."""
    assistant_to_user: str  # end of an assistant turn + start of a user turn
    user_to_assistant: str  # end of a user turn + start of an assistant turn

    @classmethod
    def from_tokenizer(cls, tokenizer) -> "ChatGlue":
        a, u, b = "\x00A\x00", "\x00U\x00", "\x00B\x00"
        msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "q"},
                {"role": "assistant", "content": a}, {"role": "user", "content": u}]
        text = tokenizer.apply_chat_template(msgs, add_generation_prompt=False)
        text2 = tokenizer.apply_chat_template(
            msgs + [{"role": "assistant", "content": b}], add_generation_prompt=False)
        if a not in text or u not in text or b not in text2:
            raise ValueError("chat template drops message content; cannot derive turn glue")
        a2u = text.split(a, 1)[1].split(u, 1)[0]
        u2a = text2.split(u, 1)[1].split(b, 1)[0]
        return cls(a2u, u2a)


def render_history(tokenizer, system: str, visible: list[tuple[str, str]]) -> str:
    """System prompt + visible turns, ending with an open assistant turn."""
    msgs = [{"role": "system", "content": system}] + [
        {"role": role, "content": text} for role, text in visible]
    return tokenizer.apply_chat_template(msgs, add_generation_prompt=True)


def extend_history(tokenizer, system: str, before: list[tuple[str, str]] | None,
                   after: list[tuple[str, str]], tokens: list[int] | None) -> list[int]:
    """h_t's token ids for the visible turns `after`, given `tokens` for the turns `before`.

    The new turns are appended as the tokens of the text they add to the rendering, not by
    re-encoding the whole history, so h_{t+1} extends h_t token for token whatever the
    tokenizer would merge across the boundary: a kept KV cache of h_t stays valid, and a
    policy that re-prefills sees the same ids. The whole history is encoded afresh at the
    first round, and when the template re-renders earlier turns or the new text's tokens
    do not decode back to it (a tokenizer that adds a prefix space per call).
    """
    text = render_history(tokenizer, system, after)
    if tokens is not None and before is not None:
        old = render_history(tokenizer, system, before)
        if text.startswith(old):
            tail = tokenizer.encode(text[len(old):])
            if tokenizer.decode(tail) == text[len(old):]:
                return list(tokens) + tail
    return tokenizer.encode(text)


@dataclasses.dataclass
class Segments:
    """Token ids with a parallel policy mask and decision mask."""
    tokens: list[int] = dataclasses.field(default_factory=list)
    policy: list[float] = dataclasses.field(default_factory=list)
    decision: list[float] = dataclasses.field(default_factory=list)

    def controller(self, ids) -> None:
        self.tokens += list(ids)
        self.policy += [0.0] * len(ids)
        self.decision += [0.0] * len(ids)

    def sampled(self, ids, *, is_decision: bool = False) -> None:
        ids = list(ids)
        self.tokens += ids
        self.policy += [1.0] * len(ids)
        self.decision += [1.0 if (is_decision and i == 0) else 0.0 for i in range(len(ids))]

    def __len__(self) -> int:
        return len(self.tokens)
