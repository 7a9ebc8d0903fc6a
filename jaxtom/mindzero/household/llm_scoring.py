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
  * `ModelScorer(model, tokenizer, chat=...)`: any loaded jaxtom `Decoder`. Queries whose
    options are all single tokens (letters) take one row (the next-token distribution after
    the prompt); others one row per option. Rows are batched with right padding into bucketed
    shapes (powers of two: rows up to `rows_per_call`, lengths from `min_length`, scored
    positions), one jitted forward per shape, so same-shaped batches never recompile
    (`compiles` counts traces, `tokens_run` the positions computed). By default
    (`share_prefix`) rows whose prompts share a long token prefix (a sample's hypotheses after
    the same state and history; a prompt's options) prefill that prefix once into a KV cache
    and run only their own tokens on top of it. With `chat=True` the prompt is one user
    message through the tokenizer's chat template (`chat_options`, e.g.
    enable_thinking=False), as a chat server would render it.
  * `HTTPScorer(base_url, model, mode=...)` (module `llm_scoring_http`): an
    OpenAI-compatible server (vLLM). `mode="completions"`: `/completions` with `echo` and `logprobs`, one request per query
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

Also: `score_options(scorer, prompt, options, normalised=)` for one query, `check_queries`,
and, in `llm_scoring_http`, `top_k_option_logprobs` (reading a top-k list).

Bad input raises `ValueError` naming the query: no options, an empty option, an empty prompt,
or (model backend) a prompt plus option longer than the model's context.
"""

from __future__ import annotations

import dataclasses
from typing import Protocol, Sequence

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
@dataclasses.dataclass
class _Row:
    """One model row: `tokens` (prompt, then option tokens for a multi-token option);
    `pred[k]` is the position whose next-token distribution scores `targets[k]`, which adds
    to option `opts[k]` of query `query`."""
    query: int
    prompt_len: int
    tokens: list[int]
    pred: list[int]
    targets: list[int]
    opts: list[int]


class ModelScorer:
    """Option log-probs under a loaded jaxtom decoder (see the module docstring).

    `max_len` caps the context (default: the model's `max_position_embeddings`). The
    parameters are a snapshot taken here: assign `scorer.params = nnx.state(model)` to follow
    a model that trains. With `share_prefix` (default) the prompts of one call are grouped by
    common token prefixes (at least `min_shared` tokens, e.g. one sample's goal hypotheses
    after the same state and history, or one prompt's options); each group's prefix is
    prefilled once into a KV cache and only the rest of each row is run on top of it.
    """

    def __init__(self, model, tokenizer, *, chat: bool = False, chat_options: dict | None = None,
                 rows_per_call: int = 32, min_length: int = 32, max_len: int | None = None,
                 share_prefix: bool = True, min_shared: int = 32):
        import jax
        from flax import nnx

        if rows_per_call < 1 or min_length < 1 or min_shared < 1:
            raise ValueError(f"rows_per_call, min_length and min_shared must be >= 1, got "
                             f"{rows_per_call}, {min_length}, {min_shared}")
        self.tokenizer = tokenizer
        self.chat = chat
        self.chat_options = dict(chat_options or {})
        self.rows_per_call = int(rows_per_call)
        self.min_length = int(min_length)
        self.share_prefix = share_prefix
        self.min_shared = int(min_shared)
        self.config = model.config
        limit = model.config.max_position_embeddings
        self.max_len = int(min(max_len or limit, limit))
        self.graphdef, self.params = nnx.split(model)
        self.compiles = 0  # traces of the jitted forwards (one per new bucketed shape)
        self.tokens_run = 0  # token positions run through the model (padding included)
        self._full = jax.jit(self._full_logprobs)
        self._shared = jax.jit(self._shared_logprobs, static_argnames=("slots",))

    # jitted bodies: the Python counter increments only while tracing
    def _full_logprobs(self, params, tokens, pred, targets):
        """[R, W] log p(targets | tokens[: pred + 1]) from one full forward."""
        from flax import nnx

        self.compiles += 1
        model = nnx.merge(self.graphdef, params)
        hidden = model(tokens, return_hidden=True)
        h = _take_rows(hidden, pred)
        head, axis = model.head_weight()
        return _gather_logprobs(h, head.T if axis == 0 else head, targets)

    def _shared_logprobs(self, params, prefix, group, starts, suffix, pred, targets, slots):
        """[R, W] log-probs with each row's prefix (row `group[r]` of `prefix`, `starts[r]`
        tokens long) prefilled once into a KV cache of `slots` slots; `pred` indexes `suffix`."""
        import jax.numpy as jnp
        from flax import nnx

        from jaxtom.models.decoder import KVCache

        self.compiles += 1
        model = nnx.merge(self.graphdef, params)
        cache = KVCache.zeros(self.config, prefix.shape[0], slots)
        _, cache = model.forward_cached(prefix, cache, jnp.zeros(prefix.shape[0], jnp.int32))
        rows = KVCache(cache.k[:, group], cache.v[:, group])
        logits, _ = model.forward_cached(suffix, rows, starts)
        picked = _take_rows(logits, pred)
        return _gather_logprobs(picked, None, targets)

    def prompt_ids(self, prompt: str) -> list[int]:
        """The prompt's token ids (through the chat template when `chat`)."""
        if self.chat:
            prompt = self.tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], add_generation_prompt=True,
                **self.chat_options)
        return list(self.tokenizer.encode(prompt))

    def _rows(self, queries: list[OptionQuery]) -> list[_Row]:
        rows = []
        for i, q in enumerate(queries):
            p = self.prompt_ids(q.prompt)
            if not p:
                raise ValueError(f"query {i}: the prompt has no tokens")
            opts = [list(self.tokenizer.encode(o)) for o in q.options]
            for j, o in enumerate(opts):
                if not o:
                    raise ValueError(f"query {i}: option {j} ({q.options[j]!r}) has no tokens")
                if len(p) + len(o) > self.max_len:
                    raise ValueError(f"query {i}: prompt ({len(p)} tokens) plus option {j} "
                                     f"({len(o)} tokens) exceeds the model's context of "
                                     f"{self.max_len} tokens")
            if all(len(o) == 1 for o in opts):  # letters: one next-token distribution
                rows.append(_Row(i, len(p), p, [len(p) - 1] * len(opts), [o[0] for o in opts],
                                 list(range(len(opts)))))
                continue
            for j, o in enumerate(opts):
                rows.append(_Row(i, len(p), p + o, list(range(len(p) - 1, len(p) + len(o) - 1)),
                                 o, [j] * len(o)))
        return rows

    def option_logprobs(self, queries: Sequence[OptionQuery]) -> list[np.ndarray]:
        queries = check_queries(queries)
        rows = self._rows(queries)
        out = [np.zeros(len(q.options)) for q in queries]
        run = self._run_shared if self.share_prefix else self._run_full
        for chunk, logp in run(rows):
            for row, lp in zip(chunk, logp):
                np.add.at(out[row.query], row.opts, lp[:len(row.opts)])
        return out

    def _run_full(self, rows: list[_Row]):
        order = sorted(range(len(rows)), key=lambda k: len(rows[k].tokens))
        for lo in range(0, len(order), self.rows_per_call):
            chunk = [rows[k] for k in order[lo:lo + self.rows_per_call]]
            B = _bucket(len(chunk), 1, self.rows_per_call)
            T = _bucket(max(len(r.tokens) for r in chunk), self.min_length, self.max_len)
            tokens = _pad([r.tokens for r in chunk], B, T)
            pred, targets = self._pred_targets(chunk, B, [0] * len(chunk))
            self.tokens_run += B * T
            yield chunk, np.asarray(self._full(self.params, tokens, pred, targets), np.float64)

    def _groups(self, rows: list[_Row]) -> list[tuple[int, list[_Row]]]:
        """(prefix length, rows) groups of at most `rows_per_call` rows. Rows are sorted by
        prompt and a row joins the previous group when their prompts share at least
        `min_shared` tokens (or the whole shorter prompt) and shrinking the group's prefix to
        the shared part costs less than the row's own prefill. A prefix stops before each
        prompt's last token, whose output scores the first option token."""
        order = sorted(rows, key=lambda r: r.tokens[:r.prompt_len])
        groups: list[list] = []
        for r in order:
            prompt = r.tokens[:r.prompt_len]
            if groups:
                pre, members = groups[-1]
                shared = _common_prefix(pre, prompt)
                lost = (len(members) - 1) * (len(pre) - shared)
                if shared >= max(1, min(self.min_shared, len(prompt) - 1, len(pre))) \
                        and lost < shared:
                    groups[-1][0] = prompt[:shared]
                    members.append(r)
                    continue
            groups.append([prompt, [r]])
        out = []
        for pre, members in groups:
            n = min(len(pre), *(r.prompt_len - 1 for r in members))
            for lo in range(0, len(members), self.rows_per_call):
                out.append((n, members[lo:lo + self.rows_per_call]))
        return out

    def _run_shared(self, rows: list[_Row]):
        groups = self._groups(rows)
        chunk_groups: list = []
        for g in groups + [None]:
            size = sum(len(m) for _, m in chunk_groups)
            if g is None or (chunk_groups and size + len(g[1]) > self.rows_per_call):
                if chunk_groups:
                    yield from self._shared_chunk(chunk_groups)
                chunk_groups = []
            if g is not None:
                chunk_groups.append(g)

    def _shared_chunk(self, groups):
        chunk = [r for _, members in groups for r in members]
        G = _bucket(len(groups), 1, self.rows_per_call)
        B = _bucket(len(chunk), 1, self.rows_per_call)
        P = _bucket(max(n for n, _ in groups), 1)
        lengths = [n for n, members in groups for _ in members]
        S_suffix = _bucket(max(len(r.tokens) - n for r, n in zip(chunk, lengths)), 1)
        slots = _bucket(max(P, max(lengths) + S_suffix), self.min_length)
        prefix = _pad([members[0].tokens[:n] for n, members in groups], G, P)
        group = np.zeros(B, np.int32)
        group[:len(chunk)] = [g for g, (_, members) in enumerate(groups) for _ in members]
        starts = np.zeros(B, np.int32)
        starts[:len(chunk)] = lengths
        suffix = _pad([r.tokens[n:] for r, n in zip(chunk, lengths)], B, S_suffix)
        pred, targets = self._pred_targets(chunk, B, lengths)
        self.tokens_run += G * P + B * S_suffix
        yield chunk, np.asarray(self._shared(self.params, prefix, group, starts, suffix, pred,
                                             targets, slots=slots), np.float64)

    @staticmethod
    def _pred_targets(chunk: list[_Row], B: int, offsets: list[int]):
        W = _bucket(max(len(r.pred) for r in chunk), 1)
        pred = np.zeros((B, W), np.int32)
        targets = np.zeros((B, W), np.int32)
        for b, (r, off) in enumerate(zip(chunk, offsets)):
            pred[b, :len(r.pred)] = np.asarray(r.pred) - off
            targets[b, :len(r.targets)] = r.targets
        return pred, targets


def _pad(seqs: list[list[int]], rows: int, length: int) -> np.ndarray:
    out = np.zeros((rows, length), np.int32)
    for b, s in enumerate(seqs):
        out[b, :len(s)] = s
    return out


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    for k in range(n):
        if a[k] != b[k]:
            return k
    return n


def _take_rows(x, pred):
    """x [R, T, D] at positions pred [R, W] -> [R, W, D]."""
    import jax.numpy as jnp

    return jnp.take_along_axis(x, pred[..., None], axis=1)


def _gather_logprobs(h, head, targets):
    """log_softmax(h @ head) (or of h itself when head is None) at `targets` [R, W]."""
    import jax
    import jax.numpy as jnp

    logits = h if head is None else h @ head.astype(h.dtype)
    logp = jax.nn.log_softmax(logits.astype(jnp.float32), axis=-1)
    return jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]


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
