"""Option scoring from token log-probs: how likely a model finds each of a few answers.

The household LLM estimators (`llm_prompts`) ask a model a question and read the probability
of each answer option ("A" / "B", or whole action texts) instead of sampling a reply, as
AutoToM and the public MindZero code do. Every backend here answers the same call:

    scorer.option_logprobs(queries: Sequence[OptionQuery]) -> list[np.ndarray]

one float64 array per query, entry j = `log P(option_j | prompt)`: the sum of the option's
token log-probs after the prompt (the prompt and the option are tokenised separately and
concatenated, so an option's tokens never depend on the prompt's last characters).
`normalise_logprobs(lp)` turns them into `log [P(o_j | prompt) / sum_k P(o_k | prompt)]`, the
normalised-over-options score AutoToM uses (the public code's P(A) / (P(A) + P(B))).

Backends
  * `ModelScorer(model, tokenizer, chat=...)`: any loaded jaxtom `Decoder`. Queries are
    batched with right padding into bucketed shapes (rows: powers of two up to
    `rows_per_call`; length: powers of two from `min_length`; scored width: powers of two), one
    jitted forward per shape, so same-shaped batches never recompile (`compiles` counts
    traces). Queries whose options are all single tokens (letters) use one row per query (the
    next-token distribution after the prompt); others use one row per option. With
    `chat=True` the prompt is sent as one user message through the tokenizer's chat template
    (`chat_options`, e.g. enable_thinking=False), as a chat server would render it.
  * `HTTPScorer(base_url, model, mode=...)`: an OpenAI-compatible server (vLLM).
    `mode="completions"`: `/completions` with `echo` and `logprobs`, one request per query
    holding every `prompt + option` text, the option's tokens found by their text offsets
    (exact, any option length). `mode="chat_top_logprobs"`: the public code's estimator,
    `/chat/completions` with temperature 0, one generated token and `top_logprobs` (5); an
    option's log-prob is that of the top tokens equal to it (ignoring surrounding spaces);
    an option missing from the top k gets an upper bound, `min(smallest top-k log-prob,
    log(1 - sum of top-k probs))` (floored at log 1e-30). Timeouts, retries on connection
    errors, HTTP 429/5xx and malformed bodies, and exponential backoff follow the CToM
    `HTTPSimulator` (same fields and defaults; `HTTPScorer.from_client(simulator)` copies a
    configured one). Failure after the retries raises `ScoringError`.
  * `CachedScorer(inner)`: memoises by (prompt, options); repeated queries, also within one
    call, cost nothing. `hits`, `misses`, `stats()`.

Bad input raises `ValueError` naming the query: no options, an empty option, an empty prompt,
or (model backend) a prompt plus option longer than the model's context.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol, Sequence

import numpy as np


@dataclasses.dataclass(frozen=True)
class OptionQuery:
    """A prompt and the answer options whose log-probs are wanted (a hashable cache key)."""
    prompt: str
    options: tuple[str, ...]

    def __post_init__(self):
        object.__setattr__(self, "options", tuple(self.options))


class ScoringError(RuntimeError):
    """A backend could not score a query (after its retries)."""


class OptionScorer(Protocol):
    def option_logprobs(self, queries: Sequence[OptionQuery]) -> list[np.ndarray]: ...


def check_queries(queries: Sequence[OptionQuery]) -> list[OptionQuery]:
    """The queries as a list, or a ValueError naming the first bad one."""
    out = []
    for i, q in enumerate(queries):
        if not isinstance(q, OptionQuery):
            q = OptionQuery(*q)
        if not isinstance(q.prompt, str) or not q.prompt:
            raise ValueError(f"query {i}: the prompt must be a non-empty string")
        if not q.options:
            raise ValueError(f"query {i}: no options to score")
        for j, o in enumerate(q.options):
            if not isinstance(o, str) or not o:
                raise ValueError(f"query {i}: option {j} must be a non-empty string, got {o!r}")
        out.append(q)
    return out


def normalise_logprobs(logprobs) -> np.ndarray:
    """`lp_j - logsumexp(lp)`: log P(option_j | prompt, one of the options). All -inf stays
    -inf (no option has any mass)."""
    lp = np.asarray(logprobs, np.float64)
    top = np.max(lp)
    if not np.isfinite(top):
        return np.full_like(lp, -np.inf)
    return lp - (top + np.log(np.sum(np.exp(lp - top))))


def score_options(scorer: OptionScorer, prompt: str, options: Sequence[str], *,
                  normalised: bool = False) -> np.ndarray:
    """One query's option log-probs (normalised over the options if asked)."""
    lp = scorer.option_logprobs([OptionQuery(prompt, tuple(options))])[0]
    return normalise_logprobs(lp) if normalised else lp


def _bucket(n: int, lo: int, hi: int | None = None) -> int:
    size = max(lo, 1 << max(n - 1, 0).bit_length())
    return size if hi is None else min(size, max(hi, n))


# ---- jaxtom model ----------------------------------------------------------------------
class ModelScorer:
    """Option log-probs under a loaded jaxtom decoder (see the module docstring).

    `max_len` caps the context (default: the model's `max_position_embeddings`).
    """

    def __init__(self, model, tokenizer, *, chat: bool = False, chat_options: dict | None = None,
                 rows_per_call: int = 32, min_length: int = 32, max_len: int | None = None):
        import jax
        from flax import nnx

        if rows_per_call < 1 or min_length < 1:
            raise ValueError(f"rows_per_call and min_length must be >= 1, got {rows_per_call}, "
                             f"{min_length}")
        self.tokenizer = tokenizer
        self.chat = chat
        self.chat_options = dict(chat_options or {})
        self.rows_per_call = int(rows_per_call)
        self.min_length = int(min_length)
        limit = model.config.max_position_embeddings
        self.max_len = int(min(max_len or limit, limit))
        self.graphdef, self.params = nnx.split(model)
        self.compiles = 0  # traces of either jitted function (one per new shape)
        self._rows = jax.jit(self._row_logprobs, static_argnames=("width",))
        self._next = jax.jit(self._next_logprobs)

    # jitted bodies: a Python counter increments only while tracing
    def _row_logprobs(self, params, tokens, scored, width):
        import jax.numpy as jnp
        from flax import nnx

        from jaxtom.rl.logprobs import token_logprobs_from_hidden

        self.compiles += 1
        model = nnx.merge(self.graphdef, params)
        hidden = model(tokens, return_hidden=True)
        head, axis = model.head_weight()
        lp, _ = token_logprobs_from_hidden(hidden, head, tokens, vocab_axis=axis,
                                           scored=scored, width=width)
        return jnp.sum(lp, axis=1)

    def _next_logprobs(self, params, tokens, last, option_ids):
        import jax
        import jax.numpy as jnp
        from flax import nnx

        self.compiles += 1
        model = nnx.merge(self.graphdef, params)
        hidden = model(tokens, return_hidden=True)
        h = jnp.take_along_axis(hidden, last[:, None, None], axis=1)[:, 0]
        head, axis = model.head_weight()
        logits = (h @ (head.T if axis == 0 else head).astype(h.dtype)).astype(jnp.float32)
        logp = jax.nn.log_softmax(logits, axis=-1)
        return jnp.take_along_axis(logp, option_ids, axis=1)

    def prompt_ids(self, prompt: str) -> list[int]:
        """The prompt's token ids (through the chat template when `chat`)."""
        if self.chat:
            prompt = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], add_generation_prompt=True,
                **self.chat_options)
        return list(self.tokenizer.encode(prompt))

    def option_logprobs(self, queries: Sequence[OptionQuery]) -> list[np.ndarray]:
        queries = check_queries(queries)
        single, multi = [], []  # (query index, prompt ids, option ids)
        for i, q in enumerate(queries):
            p = self.prompt_ids(q.prompt)
            opts = [list(self.tokenizer.encode(o)) for o in q.options]
            for j, o in enumerate(opts):
                if not o:
                    raise ValueError(f"query {i}: option {j} ({q.options[j]!r}) has no tokens")
                if len(p) + len(o) > self.max_len:
                    raise ValueError(f"query {i}: prompt ({len(p)} tokens) plus option {j} "
                                     f"({len(o)} tokens) exceeds the model's context of "
                                     f"{self.max_len} tokens")
            (single if all(len(o) == 1 for o in opts) else multi).append((i, p, opts))
        out: list[np.ndarray | None] = [None] * len(queries)
        self._score_single(single, out)
        self._score_multi(multi, out)
        return out  # type: ignore[return-value]

    def _chunks(self, rows):
        """Rows sorted by length, in chunks of at most rows_per_call."""
        order = sorted(range(len(rows)), key=lambda k: len(rows[k]))
        for lo in range(0, len(order), self.rows_per_call):
            yield order[lo:lo + self.rows_per_call]

    def _score_single(self, items, out):
        if not items:
            return
        rows = [p for _, p, _ in items]
        for chunk in self._chunks(rows):
            B = _bucket(len(chunk), 1, self.rows_per_call)
            T = _bucket(max(len(rows[k]) for k in chunk), self.min_length, self.max_len)
            K = _bucket(max(len(items[k][2]) for k in chunk), 2)
            tokens = np.zeros((B, T), np.int32)
            last = np.zeros(B, np.int32)
            ids = np.zeros((B, K), np.int32)
            for r, k in enumerate(chunk):
                tokens[r, :len(rows[k])] = rows[k]
                last[r] = len(rows[k]) - 1
                ids[r, :len(items[k][2])] = [o[0] for o in items[k][2]]
            lp = np.asarray(self._next(self.params, tokens, last, ids), np.float64)
            for r, k in enumerate(chunk):
                out[items[k][0]] = lp[r, :len(items[k][2])].copy()

    def _score_multi(self, items, out):
        rows, where = [], []  # full token rows and (item, option) they score
        for n, (_, p, opts) in enumerate(items):
            for j, o in enumerate(opts):
                rows.append((p, o))
                where.append((n, j))
        if not rows:
            return
        results = [np.zeros(len(opts)) for _, _, opts in items]
        lengths = [p + o for p, o in rows]
        for chunk in self._chunks(lengths):
            B = _bucket(len(chunk), 1, self.rows_per_call)
            T = _bucket(max(len(lengths[k]) for k in chunk), self.min_length, self.max_len)
            W = _bucket(max(len(rows[k][1]) for k in chunk), 1, T)
            tokens = np.zeros((B, T), np.int32)
            scored = np.zeros((B, T), bool)
            for r, k in enumerate(chunk):
                p, o = rows[k]
                tokens[r, :len(p) + len(o)] = p + o
                scored[r, len(p):len(p) + len(o)] = True
            lp = np.asarray(self._rows(self.params, tokens, scored, width=W), np.float64)
            for r, k in enumerate(chunk):
                n, j = where[k]
                results[n][j] = lp[r]
        for (i, _, _), res in zip(items, results):
            out[i] = res


# ---- OpenAI-compatible HTTP --------------------------------------------------------------
HTTP_MODES = ("completions", "chat_top_logprobs")
MISSING_FLOOR = math.log(1e-30)


def post_json(url: str, body: dict, *, api_key: str | None, timeout_s: float, retries: int,
              backoff_s: float) -> dict:
    """POSTs `body` and returns the decoded JSON reply, with the CToM HTTP client's policy:
    retry on timeouts, connection errors, HTTP 429/5xx and non-JSON bodies, sleeping
    backoff_s * 2**(attempt - 1); a 4xx other than 429 fails at once. Raises ScoringError."""
    data = json.dumps(body).encode()
    headers = {"Content-Type": "application/json"}
    if api_key:
        headers["Authorization"] = f"Bearer {api_key}"
    last = "no attempt made"
    for attempt in range(retries + 1):
        if attempt:
            time.sleep(backoff_s * 2 ** (attempt - 1))
        try:
            req = urllib.request.Request(url, data=data, headers=headers, method="POST")
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:
                reply = json.loads(resp.read().decode())
            if not isinstance(reply, dict):
                raise TypeError("the reply is not a JSON object")
            return reply
        except urllib.error.HTTPError as e:
            last = f"HTTP {e.code} from {url}"
            if e.code < 500 and e.code != 429:
                break
        except (TimeoutError, urllib.error.URLError, ConnectionError, OSError) as e:
            last = f"{type(e).__name__} talking to {url}: {getattr(e, 'reason', e)}"
        except (json.JSONDecodeError, TypeError, UnicodeDecodeError) as e:
            last = f"malformed response from {url} ({type(e).__name__}: {e})"
    raise ScoringError(f"option scoring failed after {retries + 1} attempts: {last}")


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


# ---- cache -----------------------------------------------------------------------------
class CachedScorer:
    """Memoises another scorer by (prompt, options); `max_entries` evicts oldest first."""

    def __init__(self, inner: OptionScorer, max_entries: int | None = None):
        if max_entries is not None and max_entries < 1:
            raise ValueError(f"max_entries must be >= 1 or None, got {max_entries}")
        self.inner = inner
        self.max_entries = max_entries
        self.hits = 0
        self.misses = 0
        self._store: dict[OptionQuery, np.ndarray] = {}

    def option_logprobs(self, queries: Sequence[OptionQuery]) -> list[np.ndarray]:
        queries = check_queries(queries)
        todo = list(dict.fromkeys(q for q in queries if q not in self._store))
        self.misses += len(todo)
        self.hits += len(queries) - len(todo)
        fresh = dict(zip(todo, self.inner.option_logprobs(todo))) if todo else {}
        out = [(fresh[q] if q in fresh else self._store[q]).copy() for q in queries]
        for q, v in fresh.items():
            self._store[q] = np.asarray(v, np.float64)
        if self.max_entries is not None:
            while len(self._store) > self.max_entries:
                del self._store[next(iter(self._store))]
        return out

    def stats(self) -> dict:
        return {"hits": self.hits, "misses": self.misses, "entries": len(self._store)}

    def clear(self) -> None:
        self._store.clear()
