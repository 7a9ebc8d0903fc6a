"""User simulators behind one interface: `simulator.reply(requests, seed) -> [SimReply]`.

A request carries the task (with the user's hidden information) and the *visible* history
only: the simulator never sees plans, hidden drafts or predictions. A counterfactual query is
the same request with a discarded draft as the last assistant message. A reply that could not
be obtained is `SimReply(text="", error=...)`: the controller marks that conversation failed.

  * ScriptedSimulator: deterministic per-domain rules (tests, CPU demos);
  * HTTPSimulator: an OpenAI-compatible /v1/chat/completions endpoint (vLLM serving
    Qwen3-32B), with timeouts, retries and exponential backoff;
  * LLMSimulator (simulators_llm.py): appendix C.3 prompts through jaxtom's own sampler.
"""

from __future__ import annotations

import dataclasses
import json
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol, Sequence

from jaxtom.ctom import packing
from jaxtom.ctom.data import Task
from jaxtom.ctom.prompts import ANSWER_MARKER, SIMULATOR_PROMPTS, fill_template
from jaxtom.ctom.sandbox import score_coding
from jaxtom.ctom.satisfaction import END_SIGNAL
from jaxtom.ctom.scoring import extract_boxed, score_math
from jaxtom.http_client import HTTPFailure, post_json


@dataclasses.dataclass(frozen=True)
class SimRequest:
    """One simulator call. `history` is the visible conversation; for a counterfactual query
    (section 4.2) it ends with the discarded draft d(k), and `earlier` holds the round's
    earlier hidden steps ((d(0), u^(0)), ..., (d(k-1), u^(k-1))), so the simulated user is
    conditioned on the same context as the prediction the reply supervises."""
    task: Task
    history: tuple[tuple[str, str], ...]  # visible (role, text); role "user" | "assistant"
    final: bool = False  # the last assistant message is a COMMIT submission
    earlier: tuple[tuple[str, str], ...] = ()  # (draft, predicted reply) before the last draft


@dataclasses.dataclass(frozen=True)
class SimReply:
    text: str
    error: str | None = None


class SimulatorError(RuntimeError):
    """A simulator could not produce a reply (after its retries)."""


class UserSimulator(Protocol):
    def reply(self, requests: Sequence[SimRequest], seed: int = 0) -> list[SimReply]: ...


def format_history(history: Sequence[tuple[str, str]]) -> str:
    """C.3's {chat_history}: '**User**: ...' / '**Assistant**: ...' lines."""
    return "\n".join(f"**{'User' if role == 'user' else 'Assistant'}**: {text}"
                     for role, text in history)


EARLIER_DRAFT = "**Assistant** (earlier draft {j}, revised before you saw it): {text}"
EARLIER_PREDICTION = "**Assistant** (its guess of your reply to draft {j}): {text}"


def format_round_history(request: SimRequest) -> str:
    """{chat_history} of a request: the visible lines, with a counterfactual query's earlier
    hidden drafts and predictions (labelled as such) before its last draft."""
    history = list(request.history)
    if request.final and request.task.domain != "math":
        if not history or history[-1][0] != "assistant":
            raise ValueError("a final (COMMIT) request must end with the submitted assistant "
                             "message")
        history[-1] = ("assistant", f"{ANSWER_MARKER}\n{history[-1][1]}")
    if not request.earlier:
        return format_history(history)
    if not history or history[-1][0] != "assistant":
        raise ValueError("a counterfactual request must end with the draft it asks about")
    lines = [format_history(history[:-1])] if len(history) > 1 else []
    for j, (draft, pred) in enumerate(request.earlier, 1):
        lines.append(EARLIER_DRAFT.format(j=j, text=draft))
        lines.append(EARLIER_PREDICTION.format(j=j, text=pred))
    lines.append(format_history(history[-1:]))
    return "\n".join(lines)


def simulator_prompt(request: SimRequest) -> str:
    """The C.3 template for the request's domain, filled in."""
    task = request.task
    return fill_template(SIMULATOR_PROMPTS[task.domain], problem=task.prompt,
                         ground_truth=task.reference, hidden_information=task.hidden,
                         target_words=task.target_words or 200,
                         chat_history=format_round_history(request))


_JSON_OBJ = re.compile(r"\{.*\}", re.DOTALL)
_RESPONSE = re.compile(r'"response"\s*:\s*"((?:[^"\\]|\\.)*)"', re.DOTALL)


def parse_simulator_output(text: str) -> str | None:
    """The `response` field of the simulator's JSON (tolerating fences and stray text)."""
    m = _JSON_OBJ.search(text or "")
    if m:
        try:
            data = json.loads(m.group(0))
            if isinstance(data, dict) and isinstance(data.get("response"), str):
                return data["response"].strip()
        except json.JSONDecodeError:
            pass
    m = _RESPONSE.search(text or "")
    if m:
        try:
            return json.loads(f'"{m.group(1)}"').strip()
        except json.JSONDecodeError:
            return m.group(1).strip()
    return None


_THINK = re.compile(r"<think>.*?(</think>|$)", re.DOTALL)


def reply_from_output(text: str) -> str:
    """The user's reply from a simulator model's raw output (HTTP and in-process alike).

    The JSON `response` field when it parses; otherwise (malformed JSON is a normal case) the
    raw text without any think block, cut to 400 characters. A reply that contains
    `[[TERMINATE CHAT]]` is exactly the end signal, so metrics and the satisfaction rules
    see one canonical string.
    """
    parsed = parse_simulator_output(text)
    reply = parsed if parsed is not None else _THINK.sub("", text or "").strip()[:400]
    return END_SIGNAL if END_SIGNAL in reply else reply


# ---- scripted ---------------------------------------------------------------------------
_SENT = re.compile(r"(?<=[.;])\s+|,\s+(?=[A-Z])")


def _facts(hidden: str) -> list[str]:
    return [f.strip().rstrip(".") for f in _SENT.split(hidden) if f.strip()]


def _words(text: str) -> set[str]:
    return set(re.findall(r"[a-z0-9]+", text.lower()))


class ScriptedSimulator:
    """Deterministic rules in the spirit of C.3, one per domain (no model needed).

    math: correct boxed answer -> "ok, that's right."; wrong -> doubt; no box -> asks for one.
    coding: code is run against the task's tests (sandbox); all pass -> "ok", else the first
    fact of the spec; a question -> the spec fact sharing most words with it.
    writing: a draft -> the note least covered by it (or "ok"); a question -> the best fact.
    packing: the single most important mismatch of the shown list under `packing_disclosure`
    (its item, or only which slot), else acceptance (`jaxtom.ctom.packing.user_reply`).
    A COMMIT submission on coding/writing -> the end signal.
    """

    def __init__(self, run_code: bool = True, packing_disclosure: str = "mismatch"):
        self.run_code, self.packing_disclosure = run_code, packing_disclosure

    def reply(self, requests: Sequence[SimRequest], seed: int = 0) -> list[SimReply]:
        return [SimReply(self._one(r)) for r in requests]

    def _one(self, req: SimRequest) -> str:
        task = req.task
        last = req.history[-1][1] if req.history and req.history[-1][0] == "assistant" else ""
        if req.final and task.domain != "math":
            return END_SIGNAL
        if task.domain == "math":
            if extract_boxed(last) is None:
                return ("I'm not sure, I just need the final answer." if "?" in last else
                        "Please state your final answer inside \\boxed{}.")
            if score_math(last, task.reference):
                return "ok, that's right."
            return "That's wrong, could you double-check your work?"
        if task.domain == "packing":
            return packing.user_reply(task, last, self.packing_disclosure)
        facts = _facts(task.hidden) or ["I have no additional requirement for that"]
        is_code = task.domain == "coding" and "def task_func" in last
        if is_code:
            if self.run_code:
                if score_coding(last, task.tests or "") == 1.0:
                    return "ok"
            return f"That doesn't match what I need: {facts[0]}."
        if task.domain == "writing" and "?" not in last and len(last.split()) > 20:
            missing = [f for f in facts if len(_words(f) - _words(last)) > len(_words(f)) / 2]
            return f"You're missing this: {missing[0]}." if missing else "ok"
        best = max(facts, key=lambda f: (len(_words(f) & _words(last)), -facts.index(f)))
        return f"{best}."


# ---- OpenAI-compatible HTTP --------------------------------------------------------------
@dataclasses.dataclass
class HTTPSimulator:
    """Chat completions at `base_url` (e.g. vLLM): the C.3 prompt as one user message.

    Each request is retried on timeouts, connection errors, HTTP 429/5xx and malformed bodies
    or replies, sleeping backoff * 2**attempt between tries; when the retries run out the
    reply carries an error naming the last failure (and `strict=True` raises instead).
    """
    base_url: str
    model: str
    api_key: str | None = None
    temperature: float = 0.7
    max_tokens: int = 512
    timeout_s: float = 60.0
    retries: int = 3
    backoff_s: float = 1.0
    concurrency: int = 8
    strict: bool = False

    def reply(self, requests: Sequence[SimRequest], seed: int = 0) -> list[SimReply]:
        with ThreadPoolExecutor(max(1, min(self.concurrency, len(requests) or 1))) as pool:
            return list(pool.map(lambda ir: self._one(ir[1], seed + ir[0]),
                                 enumerate(requests)))

    def complete(self, prompt: str, seed: int = 0) -> str:
        """One chat completion's text; raises SimulatorError after the retries."""
        url = self.base_url.rstrip("/") + ("" if self.base_url.rstrip("/").endswith(
            "/chat/completions") else "/chat/completions")
        body = {"model": self.model, "temperature": self.temperature,
                "max_tokens": self.max_tokens, "seed": seed,
                "messages": [{"role": "user", "content": prompt}]}
        try:
            return post_json(url, body, api_key=self.api_key, timeout_s=self.timeout_s,
                             retries=self.retries, backoff_s=self.backoff_s,
                             extract=lambda reply: reply["choices"][0]["message"]["content"])
        except HTTPFailure as e:
            raise SimulatorError(f"user simulator {e}") from None

    def _one(self, request: SimRequest, seed: int) -> SimReply:
        try:
            text = self.complete(simulator_prompt(request), seed)
        except SimulatorError as e:
            if self.strict:
                raise
            return SimReply("", str(e))
        return SimReply(reply_from_output(text))
