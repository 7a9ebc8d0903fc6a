"""Policies the controller can drive: jaxtom's sampler on a loaded model, or a scripted
stand-in (tests, demos) that answers each phase with text chosen from the context."""

from __future__ import annotations

from typing import Callable, Sequence

import jax

from jaxtom.ctom.kept_cache import KeptCaches


class SamplerPolicy:
    """Phases through `jaxtom.sampling.sampler.generate` (KV cache, stop strings, explicit key).

    With `reuse_cache` (the default) each conversation keeps its KV cache between phases and
    rounds (`kept_cache.KeptCaches`), so a phase prefills only the tokens its conversation's
    cache lacks; without it every phase prefills its whole context. Both see the same token
    sequences, so greedy transcripts agree. `prefilled` counts the tokens prefilled per
    conversation either way. `min_rows` / `min_slots` pad every kept-cache call to fixed
    shapes (`KeptCaches`). Row i of a call samples with `fold_in(key, conversations[i])`,
    so its tokens do not depend on which other conversations share the call.
    """

    def __init__(self, model, tokenizer, *, temperature: float = 1.0, top_p: float = 1.0,
                 top_k: int = 0, max_cache_len: int | None = None, reuse_cache: bool = True,
                 min_rows: int = 0, min_slots: int = 0):
        self.model, self.tokenizer = model, tokenizer
        self.temperature, self.top_p, self.top_k = temperature, top_p, top_k
        self.max_cache_len = max_cache_len
        self.caches = KeptCaches(model, max_cache_len, min_rows=min_rows,
                                 min_slots=min_slots) if reuse_cache else None
        self.prefilled: dict[int, int] = {}

    def generate(self, contexts, *, max_new_tokens, stop, kind, key, conversations=None,
                 buffer_len=None) -> list[list[int]]:
        """`conversations` names each row's conversation (its kept cache); `buffer_len` pins
        the output buffer so that phases with different caps share one decode program."""
        from jaxtom.sampling import generate
        kw = dict(max_new_tokens=max_new_tokens, temperature=self.temperature,
                  top_p=self.top_p, top_k=self.top_k, stop=list(stop), key=key,
                  tokenizer=self.tokenizer, buffer_len=buffer_len)
        if conversations is None:
            conversations = range(len(contexts))
            caches = None  # rows without identity keep nothing
        else:
            caches = self.caches
        # a row draws from fold_in(key, its conversation): not from its place in the call
        kw["row_ids"] = list(conversations)
        if caches is not None:
            out, prefilled = caches.generate(contexts, list(conversations), **kw)
        else:
            out = generate(self.model, [list(c) for c in contexts],
                           max_cache_len=self.max_cache_len, **kw)
            prefilled = [len(c) for c in contexts]
        for conv, n in zip(conversations, prefilled):
            self.prefilled[conv] = self.prefilled.get(conv, 0) + n
        return out.sequences()

    def release_caches(self) -> None:
        """Frees the kept caches (a run's end; the weights change before the next one)."""
        if self.caches is not None:
            self.caches.release()


class ScriptedPolicy:
    """`script(context_text, kind) -> text`; the text is tokenized and cut to the cap.

    `kind` is plan | decision | draft | prediction | ask (CToM mode) or response (direct
    mode, where no closing tag is expected). The script must write the closing
    tag itself, as the real policy does (a missing one is added by the controller).
    """

    def __init__(self, tokenizer, script: Callable[[str, str], str]):
        self.tokenizer, self.script = tokenizer, script
        self.calls: list[tuple[str, int]] = []  # (kind, batch size): how phases were batched

    def generate(self, contexts: Sequence[Sequence[int]], *, max_new_tokens, stop, kind,
                 key: jax.Array, conversations=None, buffer_len=None) -> list[list[int]]:
        self.calls.append((kind, len(contexts)))
        outs = []
        for ctx in contexts:
            text = self.script(self.tokenizer.decode(list(ctx)), kind)
            outs.append(self.tokenizer.encode(text)[:max_new_tokens])
        return outs
