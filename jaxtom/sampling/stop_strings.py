"""Exact stop-string detection on device.

A stop string may span several tokens and be tokenized many ways, so matching token-id
sequences misses cases. Instead each stop string becomes a KMP automaton over *token texts*:
`table[state, token]` is the matched-prefix length after appending that token's text, or -1
when the string has been completed. The decode loop then needs one gather per step.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

MATCHED = -1


def _failure(s: str) -> list[int]:
    fail = [0] * len(s)
    k = 0
    for i in range(1, len(s)):
        while k and s[i] != s[k]:
            k = fail[k - 1]
        if s[i] == s[k]:
            k += 1
        fail[i] = k
    return fail


def _run(s: str, fail: list[int], state: int, text: str, start: int = 0):
    """Feeds text[start:] to the automaton; yields the state after each character."""
    for ch in text[start:]:
        while state and s[state] != ch:
            state = fail[state - 1]
        if s[state] == ch:
            state += 1
        if state == len(s):
            yield MATCHED
            return
        yield state


def stop_table(stop: str, token_texts: Sequence[str]) -> np.ndarray:
    """[len(stop), vocab] int16 transition table of one stop string over token texts."""
    if not stop:
        raise ValueError("stop strings must be non-empty")
    m, fail = len(stop), _failure(stop)
    if m >= np.iinfo(np.int16).max:
        raise ValueError(f"stop string of {m} characters is too long")
    table = np.zeros((m, len(token_texts)), np.int16)
    first = set(stop)
    for tok, text in enumerate(token_texts):
        if not text:
            table[:, tok] = np.arange(m)  # an empty token (e.g. a special one) changes nothing
            continue
        if first.isdisjoint(text):
            continue  # state 0 from everywhere
        ref = list(_run(stop, fail, 0, text))  # the run from state 0
        table[0, tok] = ref[-1]
        for q in range(1, m):
            st = q
            for i, st in enumerate(_run(stop, fail, q, text)):
                if st == MATCHED or st == ref[i]:
                    st = MATCHED if st == MATCHED else ref[-1]
                    break  # converged with the run from 0 (or matched)
            table[q, tok] = st
    return table


def stop_tables(stops: Sequence[str], token_texts: Sequence[str]) -> np.ndarray:
    """Stacked tables [n_stops, max_len, vocab] for several stop strings."""
    if not stops:
        return np.zeros((0, 1, len(token_texts)), np.int16)
    tables = [stop_table(s, token_texts) for s in stops]
    depth = max(t.shape[0] for t in tables)
    out = np.zeros((len(tables), depth, len(token_texts)), np.int16)
    for i, t in enumerate(tables):
        out[i, :t.shape[0]] = t
    return out


def find_stop(text: str, stops: Sequence[str]) -> int | None:
    """End offset of the earliest stop string in `text`, or None (host-side reference)."""
    ends = [text.find(s) + len(s) for s in stops if s in text]
    return min(ends) if ends else None
