"""Single-process behaviour of the rollout helpers in `jaxtom.rl.distributed`."""

import jax
import numpy as np

from jaxtom.rl import distributed
from tests.rl.common import TINY, tiny_model


def test_rows_per_call_does_not_change_the_samples():
    """Each row draws from its own key, so sampling in calls of 3 rows gives the tokens of
    one call over all 8 (what `trainer.rollout_rows` relies on to bound prefill memory)."""
    model = tiny_model(seed=3)
    rng = np.random.default_rng(0)
    prompts = [rng.integers(1, TINY.vocab_size, n).tolist() for n in (3, 5, 2, 7, 4, 4, 6, 1)]
    rows = np.arange(10, 18)
    kw = dict(key=jax.random.key(7), max_new_tokens=6, temperature=1.0)
    whole = distributed.generate_rows(model, prompts, rows, **kw)
    split = distributed.generate_rows(model, prompts, rows, rows_per_call=3, **kw)
    assert split == whole and len(whole) == 8
    other = distributed.generate_rows(model, prompts, rows + 1, **kw)
    assert other != whole  # the row ids matter: the test can fail


def test_single_process_helpers_are_local():
    assert distributed.max_over_processes(5) == 5
    assert distributed.weighted_mean({"a": 2.0}, 3) == {"a": 2.0}
    assert distributed.gather_objects({"a": 1}) == [{"a": 1}]
    assert distributed.gather_token_lists([[1, 2], [3]]) == [[[1, 2], [3]]]
    calls = distributed.call_slices([5, 2], rows_per_call=2)
    assert calls == [[slice(0, 2), slice(0, 2)], [slice(2, 4), slice(2, 2)],
                     [slice(4, 5), slice(2, 2)]]
