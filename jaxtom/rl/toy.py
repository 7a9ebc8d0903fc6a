"""A toy task for smoke tests and the CPU config: reward = share of one target token.

Any model learns it within a few hundred steps, so it checks the whole loop (sampling,
rewards, advantages, update) end to end without a tokenizer or a real checkpoint.
"""

from __future__ import annotations

import numpy as np


def toy_token_tasks(num_prompts: int = 64, prompt_len: int = 4, vocab_size: int = 32,
                    seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [{"prompt": rng.integers(1, vocab_size, prompt_len).tolist()}
            for _ in range(num_prompts)]


class TargetTokenReward:
    """Fraction of completion tokens equal to `target` (0 for an empty completion)."""

    def __init__(self, target: int):
        self.target = target

    def __call__(self, completions, tasks):
        return [float(np.mean([t == self.target for t in c])) if len(c) else 0.0
                for c in completions]
