"""Policies the controller can drive: jaxtom's sampler on a loaded model, or a scripted
stand-in (tests, demos) that answers each phase with text chosen from the context."""

from __future__ import annotations

from typing import Callable, Sequence

import jax


class SamplerPolicy:
    """Phases through `jaxtom.sampling.generate` (KV cache, stop strings, explicit key)."""

    def __init__(self, model, tokenizer, *, temperature: float = 1.0, top_p: float = 1.0,
                 top_k: int = 0, max_cache_len: int | None = None):
        self.model, self.tokenizer = model, tokenizer
        self.temperature, self.top_p, self.top_k = temperature, top_p, top_k
        self.max_cache_len = max_cache_len

    def generate(self, contexts, *, max_new_tokens, stop, kind, key) -> list[list[int]]:
        from jaxtom.sampling import generate
        out = generate(self.model, [list(c) for c in contexts], max_new_tokens=max_new_tokens,
                       temperature=self.temperature, top_p=self.top_p, top_k=self.top_k,
                       stop=list(stop), key=key, tokenizer=self.tokenizer,
                       max_cache_len=self.max_cache_len)
        return out.sequences()


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
                 key: jax.Array) -> list[list[int]]:
        self.calls.append((kind, len(contexts)))
        outs = []
        for ctx in contexts:
            text = self.script(self.tokenizer.decode(list(ctx)), kind)
            outs.append(self.tokenizer.encode(text)[:max_new_tokens])
        return outs
