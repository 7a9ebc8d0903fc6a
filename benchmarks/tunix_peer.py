"""tunix's vanilla sampler on a Hugging Face Qwen3 directory (peer for benchmarks/sampling.py).

tunix samples from strings, so prompts travel as space-separated token ids through a
trivial tokenizer; the model weights are read by tunix's own safetensors loader.
"""

from __future__ import annotations

import numpy as np


class IdTokenizer:
    """'5 6 7' <-> [5, 6, 7]; lets tunix run on exact token ids."""

    def encode(self, text, **_):
        return [int(t) for t in text.split()]

    def decode(self, ids, **_):
        return " ".join(str(int(i)) for i in ids)

    def bos_id(self):
        return 0

    def eos_id(self):
        return -1

    def pad_id(self):
        return 0


def tunix_greedy(path, prompts, gen_len, eos: int = -1):
    """A zero-argument callable running tunix greedy decoding; returns [batch, gen_len]
    (rows that stop at `eos` are padded with it after their end)."""
    from tunix.generate.sampler import CacheConfig, Sampler

    try:
        from benchmarks.parity import tunix_qwen3
    except ImportError:  # run as a script from benchmarks/
        from parity import tunix_qwen3
    model, cfg = tunix_qwen3(path)
    prompt_len = max(map(len, prompts))
    sampler = Sampler(model, IdTokenizer(), CacheConfig(
        cache_size=prompt_len + gen_len + 8, num_layers=cfg.num_layers,
        num_kv_heads=cfg.num_kv_heads, head_dim=cfg.head_dim))
    texts = [" ".join(map(str, p)) for p in prompts]

    def run():
        out = sampler(texts, max_generation_steps=gen_len, max_prompt_length=prompt_len,
                      temperature=0.0, eos_tokens=[eos])
        rows = [np.asarray(t)[:gen_len] for t in out.tokens]
        return np.stack([np.pad(r, (0, gen_len - len(r)), constant_values=eos) for r in rows])

    return run
