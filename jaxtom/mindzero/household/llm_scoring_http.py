"""The OpenAI-compatible HTTP backend of `llm_scoring` (vLLM serving a large judge model).

`HTTPScorer(base_url, model, mode=...)` answers `option_logprobs(queries)` like every scorer:
  * `mode="completions"`: `/completions` with `echo` and `logprobs`, one request per query
    holding every `prompt + option` text; the option's tokens are found by their text offsets
    (exact, any option length; a token that straddles the prompt/option boundary counts for
    the option; generated tokens after it do not). The prompt is sent as raw text: render a
    chat template first (`Tokenizer.apply_chat_template`) to score a chat model this way.
  * `mode="chat_top_logprobs"`: the public MindZero estimator, `/chat/completions` with
    temperature 0, one generated token and `top_logprobs` (5): `top_k_option_logprobs`.
Requests go through `post_json`, with the CToM `HTTPSimulator`'s policy and fields (timeout,
retries on timeouts / connection errors / HTTP 429 and 5xx / malformed bodies, exponential
backoff, concurrency); `HTTPScorer.from_client(simulator)` copies a configured simulator's
server and settings. Failure after the retries raises `ScoringError`.
"""

from __future__ import annotations

import dataclasses
import math
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Sequence

import numpy as np

from jaxtom.mindzero.household.llm_scoring import OptionQuery, ScoringError, check_queries
from jaxtom.http_client import HTTPFailure
from jaxtom.http_client import post_json as http_post_json

HTTP_MODES = ("completions", "chat_top_logprobs")
MISSING_FLOOR = math.log(1e-30)


def post_json(url: str, body: dict, *, api_key: str | None, timeout_s: float, retries: int,
              backoff_s: float) -> dict:
    """The decoded JSON object replied to POSTing `body`, with the CToM HTTP client's policy
    (`jaxtom.http_client.post_json`). Raises ScoringError."""
    def as_object(reply):
        if not isinstance(reply, dict):
            raise TypeError("the reply is not a JSON object")
        return reply
    try:
        return http_post_json(url, body, api_key=api_key, timeout_s=timeout_s, retries=retries,
                              backoff_s=backoff_s, extract=as_object)
    except HTTPFailure as e:
        raise ScoringError(f"option scoring {e}") from None


@dataclasses.dataclass
class HTTPScorer:
    """Option log-probs from an OpenAI-compatible server (see the module docstring).

    `base_url` is the API root (e.g. http://host:8000/v1). The client fields mirror
    `jaxtom.ctom.simulators.HTTPSimulator`.
    """
    base_url: str
    model: str
    api_key: str | None = None
    mode: str = "completions"
    top_logprobs: int = 5
    max_tokens: int = 1  # completions mode: tokens generated after the echo (ignored)
    timeout_s: float = 60.0
    retries: int = 3
    backoff_s: float = 1.0
    concurrency: int = 8
    extra_body: dict = dataclasses.field(default_factory=dict)  # e.g. chat_template_kwargs

    def __post_init__(self):
        if self.mode not in HTTP_MODES:
            raise ValueError(f"HTTPScorer.mode must be one of {HTTP_MODES}, got {self.mode!r}")
        if self.top_logprobs < 1 or self.retries < 0 or self.timeout_s <= 0:
            raise ValueError("HTTPScorer needs top_logprobs >= 1, retries >= 0, timeout_s > 0")

    @classmethod
    def from_client(cls, client: Any, **overrides) -> "HTTPScorer":
        """The same server, model, key, timeouts, retries and concurrency as a configured
        `HTTPSimulator` (a base_url ending in /chat/completions is cut back to the root)."""
        base = client.base_url.rstrip("/")
        if base.endswith("/chat/completions"):
            base = base[:-len("/chat/completions")]
        fields = dict(base_url=base, model=client.model, api_key=client.api_key,
                      timeout_s=client.timeout_s, retries=client.retries,
                      backoff_s=client.backoff_s, concurrency=client.concurrency)
        return cls(**{**fields, **overrides})

    def _post(self, endpoint: str, body: dict) -> dict:
        return post_json(self.base_url.rstrip("/") + endpoint, {**body, **self.extra_body},
                         api_key=self.api_key, timeout_s=self.timeout_s, retries=self.retries,
                         backoff_s=self.backoff_s)

    def option_logprobs(self, queries: Sequence[OptionQuery]) -> list[np.ndarray]:
        queries = check_queries(queries)
        one = self._completions if self.mode == "completions" else self._chat_top
        if not queries:
            return []
        with ThreadPoolExecutor(max(1, min(self.concurrency, len(queries)))) as pool:
            return list(pool.map(one, queries))

    def _completions(self, q: OptionQuery) -> np.ndarray:
        body = {"model": self.model, "prompt": [q.prompt + o for o in q.options], "echo": True,
                "logprobs": 1, "max_tokens": self.max_tokens, "temperature": 0.0}
        reply = self._post("/completions", body)
        try:
            choices = sorted(reply["choices"], key=lambda c: c.get("index", 0))
            if len(choices) != len(q.options):
                raise ValueError(f"{len(choices)} choices for {len(q.options)} prompts")
            return np.array([_echoed_option_logprob(c["logprobs"], len(q.prompt), len(o))
                             for c, o in zip(choices, q.options)], np.float64)
        except (KeyError, IndexError, TypeError, ValueError) as e:
            raise ScoringError(f"malformed completions reply ({type(e).__name__}: {e})") from e

    def _chat_top(self, q: OptionQuery) -> np.ndarray:
        stripped = [o.strip() for o in q.options]
        if len(set(stripped)) != len(stripped) or not all(stripped):
            raise ValueError(f"chat_top_logprobs needs distinct non-blank options, got "
                             f"{q.options}")
        body = {"model": self.model, "messages": [{"role": "user", "content": q.prompt}],
                "max_tokens": 1, "temperature": 0.0, "logprobs": True,
                "top_logprobs": self.top_logprobs}
        reply = self._post("/chat/completions", body)
        try:
            top = reply["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
            pairs = [(str(t["token"]), float(t["logprob"])) for t in top]
        except (KeyError, IndexError, TypeError, ValueError) as e:
            raise ScoringError(f"malformed chat reply, no top_logprobs ({type(e).__name__}: "
                               f"{e})") from e
        return top_k_option_logprobs(pairs, q.options)


def top_k_option_logprobs(top: Sequence[tuple[str, float]], options: Sequence[str]
                          ) -> np.ndarray:
    """Each option's log-prob from a first token's top-k (token, logprob) list: the summed
    probability of the listed tokens equal to it up to surrounding spaces; an option not
    listed gets the bound min(smallest listed log-prob, log(1 - listed mass)), at least
    log 1e-30."""
    probs = [(tok.strip(), math.exp(lp)) for tok, lp in top if math.isfinite(lp)]
    listed = sum(p for _, p in probs)
    smallest = min((math.log(p) for _, p in probs if p > 0), default=0.0)
    rest = math.log(max(1.0 - listed, 1e-30))
    missing = max(min(smallest, rest), MISSING_FLOOR)
    out = []
    for o in options:
        mass = sum(p for tok, p in probs if tok == o.strip())
        out.append(math.log(mass) if mass > 0 else missing)
    return np.array(out, np.float64)


def _echoed_option_logprob(lp: dict, prompt_chars: int, option_chars: int) -> float:
    """Sum of the echoed token log-probs covering characters [prompt_chars, prompt_chars +
    option_chars): tokens starting inside the option, plus a token that starts in the prompt
    and runs into it (the tokenizer merged across the boundary). Generated tokens after the
    option are not counted."""
    offsets, tokens, values = lp["text_offset"], lp["tokens"], lp["token_logprobs"]
    if not len(offsets) == len(tokens) == len(values):
        raise ValueError("text_offset, tokens and token_logprobs differ in length")
    end = prompt_chars + option_chars
    total, used = 0.0, 0
    for start, tok, value in zip(offsets, tokens, values):
        if start >= end:
            break
        if start >= prompt_chars or start + len(tok) > prompt_chars:
            if value is None:
                raise ValueError("an option token has no log-prob (empty prompt?)")
            total += float(value)
            used += 1
    if not used:
        raise ValueError("no echoed token covers the option")
    return total
