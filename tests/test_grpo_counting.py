"""`benchmarks/grpo_iteration.py` compares equal sampled work only if tunix samples with a new
key every iteration and both sides count a completion's tokens alike
(`benchmarks/grpo_counting.py`). The jaxtom-side checks run everywhere; the tunix-side ones
run tunix's own code (its rollout config, its sampler's completion cut) and are skipped where
tunix is not installed (the main venv: tunix lives in the bench venv)."""

import dataclasses
import importlib.util
import pathlib

import numpy as np
import pytest

_PATH = pathlib.Path(__file__).resolve().parents[1] / "benchmarks" / "grpo_counting.py"
_SPEC = importlib.util.spec_from_file_location("grpo_counting", _PATH)
counting = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(counting)

STOP, CAP = 7, 6


def tunix_or_skip():
    try:
        import tunix.generate.utils  # noqa: F401
        from tunix.rl.rollout import base_rollout  # noqa: F401
    except ImportError as err:
        pytest.skip(f"tunix is not importable here ({err}); it is in the bench venv")


def test_sampled_tokens_count_the_stop_once_on_either_convention():
    # a completion that stopped: jaxtom keeps the stop token, tunix ends before it
    assert counting.sampled_tokens([5, 9, 3, STOP], CAP, ends_with_stop=True) == 4
    assert counting.sampled_tokens([5, 9, 3], CAP, ends_with_stop=False) == 4
    # one that ran to the cap drew no stop token
    full = [5, 9, 3, 4, 2, 1]
    assert counting.sampled_tokens(full, CAP, True) == CAP
    assert counting.sampled_tokens(full, CAP, False) == CAP
    # stopping on the last step: the cap's tokens, the stop among them
    assert counting.sampled_tokens(full[:5], CAP, False) == CAP
    with pytest.raises(ValueError):
        counting.sampled_tokens(full + [1], CAP, False)


@dataclasses.dataclass(frozen=True)
class FakeConfig:
    max_tokens_to_generate: int = CAP
    seed: int | None = None


class FakeRollout:
    def __init__(self):
        self.configs = []

    def generate(self, prompts, rollout_config):
        self.configs.append(rollout_config)
        return prompts


def test_fresh_seeds_give_every_call_its_own_seed():
    rollout = FakeRollout()
    seeds = counting.FreshSeeds(rollout, base=10)
    config = FakeConfig()
    for _ in range(3):
        assert rollout.generate(["1 2"], config) == ["1 2"]
    assert [c.seed for c in rollout.configs] == [10, 11, 12] == seeds.seeds
    assert config.seed is None  # the cluster's own config is left as it was


def test_jaxtom_completions_keep_the_stop_token(tmp_path):
    """jaxtom's rollout on a tiny model whose every id stops: each completion is one sampled
    token, the stop, and `sampled_tokens` counts it as one."""
    import jax

    from jaxtom import models
    from jaxtom.models.tiny import save_tiny_hf
    from jaxtom.rl.trainer import CompletionRollout, TrainerConfig

    vocab = 64
    save_tiny_hf(tmp_path / "m", "qwen3", vocab_size=vocab, hidden_size=32,
                 intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
                 num_key_value_heads=1, head_dim=16, max_position_embeddings=64)
    seen = []

    def reward(completions, records):
        seen.extend(list(c) for c in completions)
        return [float(i) for i in range(len(completions))]

    cfg = TrainerConfig(group_size=2, max_new_tokens=4, stop_tokens=tuple(range(vocab)))
    CompletionRollout(reward, cfg)(models.from_pretrained(tmp_path / "m"),
                                   [{"prompt": [3, 4, 5], "row": 0}], jax.random.key(0), 0)
    assert [len(c) for c in seen] == [1, 1]
    assert all(counting.sampled_tokens(c, 4, ends_with_stop=True) == 1 for c in seen)


def test_tunix_completion_ends_before_the_stop_and_counts_the_same():
    """tunix's sampler cut (`padded_fill_tokens_and_logits`, what its vanilla rollout uses)
    on one fixed completion: it keeps the tokens before the stop, and both sides' counts of
    that completion agree."""
    tunix_or_skip()
    import jax.numpy as jnp
    from tunix.generate import utils

    prompt_len, pad = 3, 0
    completion = [5, 9, 3, STOP, STOP, STOP]  # the sampler pads a finished row with the stop
    buffer = jnp.asarray([[1, 2, 4] + completion])
    lengths, tokens, _ = utils.padded_fill_tokens_and_logits(
        buffer, None, False, False, pad, jnp.asarray([STOP]), prompt_len, CAP)
    theirs = [int(t) for t in np.asarray(tokens)[0][:int(lengths[0])]]
    assert theirs == [5, 9, 3]
    ours = completion[:completion.index(STOP) + 1]  # jaxtom's: up to and with the stop
    assert (counting.sampled_tokens(theirs, CAP, ends_with_stop=False)
            == counting.sampled_tokens(ours, CAP, ends_with_stop=True) == 4)


def test_tunix_rollout_config_gets_a_new_seed_each_iteration():
    """On tunix's own `RolloutConfig`, and through the sampler's seed handling: successive
    calls get different seeds, hence different PRNG keys (the unwrapped config's None is
    `PRNGKey(0)` on every call)."""
    tunix_or_skip()
    import jax
    from tunix.rl.rollout import base_rollout

    rollout = FakeRollout()
    config = base_rollout.RolloutConfig(max_tokens_to_generate=CAP, max_prompt_length=3)
    assert config.seed is None
    counting.FreshSeeds(rollout)
    rollout.generate(["1 2 3"], config)
    rollout.generate(["1 2 3"], config)
    keys = [jax.random.PRNGKey(c.seed) for c in rollout.configs]
    assert not np.array_equal(np.asarray(keys[0]), np.asarray(keys[1]))
