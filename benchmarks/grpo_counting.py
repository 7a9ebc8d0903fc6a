"""How `grpo_iteration.py` makes its two sides sample and count alike.

* Tokens. jaxtom's completions end with the stop token they sampled (and train it); tunix's
  sampler cuts each completion before its first stop token (`padded_fill_tokens_and_logits`:
  the length ends at the first eos). Both sides are counted as *sampled completion tokens*:
  every token the sampler drew for the completion, the stop token included where the
  completion stopped. A tunix completion shorter than the cap stopped, so its count is its
  length plus one; one of the cap's length drew no stop token.
* Seeds. tunix's vanilla rollout passes `RolloutConfig.seed` to its sampler, which uses
  `PRNGKey(0)` when that is None: every iteration would sample with the same key.
  `FreshSeeds` wraps a rollout's `generate(prompts, rollout_config)` so that each call gets
  the config with its own seed (`base + call index`), as jaxtom's trainer splits a new key
  per step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence


def sampled_tokens(completion: Sequence[int], cap: int, ends_with_stop: bool) -> int:
    """Tokens the sampler drew for one completion, its stop token counted where it stopped.

    `ends_with_stop`: the side's completions keep the stop token (jaxtom) rather than end
    before it (tunix)."""
    n = len(completion)
    if ends_with_stop:
        return n
    if n > cap:
        raise ValueError(f"a completion of {n} tokens is longer than the cap {cap}")
    return n + (n < cap)  # shorter than the cap: it stopped, and the stop token was drawn


class FreshSeeds:
    """Gives every `rollout.generate(prompts, rollout_config, ...)` call a config whose
    `seed` is `base + call index`; `seeds` records them."""

    def __init__(self, rollout, base: int = 0):
        self.seeds: list[int] = []
        self.base = base
        inner = rollout.generate

        def generate(prompts, rollout_config, *args, **kwargs):
            seed = self.base + len(self.seeds)
            self.seeds.append(seed)
            return inner(prompts, dataclasses.replace(rollout_config, seed=seed), *args,
                         **kwargs)

        rollout.generate = generate
