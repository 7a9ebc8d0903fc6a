"""Sampler: resuming from a kept cache (`ResumeState(pending=None)`), rewound to any prefix,
in a cache of the shape `call_shape` gives."""

import numpy as np
import pytest

from jaxtom.sampling import sampler
from jaxtom.models import init_decoder
from jaxtom.models.config import ModelConfig
from jaxtom.models.decoder import CACHE_SEQ_AXIS
from tests.tolerance import decoder_depth, decoder_reduction, float32_tol


@pytest.fixture(scope="module")
def model():
    cfg = ModelConfig(family="qwen3", vocab_size=256, hidden_size=32, intermediate_size=64,
                      num_layers=2, num_heads=2, num_kv_heads=1, head_dim=16, qk_norm=True,
                      max_position_embeddings=512)
    return init_decoder(cfg, seed=3)


def test_kept_cache_rewound_to_a_prefix_equals_prefilling_that_prefix(model):
    prompts = [[5, 6, 7, 8, 9, 10, 11], [12, 13, 14]]
    first = sampler.generate(model, prompts, max_new_tokens=6, temperature=0.0)
    held = [p + g[:-1] for p, g in zip(prompts, first.sequences())]  # the last is pending
    assert list(first.state.lengths) == [len(h) for h in held]
    # row 0 keeps 4 tokens (a rewind), row 1 everything it holds; each appends new tokens
    keep = [4, len(held[1])]
    new = [[40, 41, 42], [first.sequences()[1][-1], 43]]
    resume = sampler.ResumeState(first.state.cache, np.asarray(keep, np.int32))
    ours = sampler.generate(model, new, max_new_tokens=12, temperature=0.0, resume=resume)
    cfg = model.config
    for h, k, more, row, lp in zip(held, keep, new, ours.sequences(), ours.logprobs):
        full = sampler.generate(model, [h[:k] + more], max_new_tokens=12, temperature=0.0)
        assert row == full.sequences()[0]
        # two float32 decode programs (tests/tolerance.py): a forward over the longer cache,
        # whose logit error enters log p = z_token - logsumexp(z) twice, plus the
        # log-softmax's sum over the vocabulary, at the logits' (or log-probs') magnitude
        keys = max(ours.state.cache.k.shape[CACHE_SEQ_AXIS],
                   full.state.cache.k.shape[CACHE_SEQ_AXIS])
        logits = np.asarray(model(np.asarray([h[:k] + more + row])))
        scale = max(float(np.abs(logits).max()), float(np.abs(full.logprobs).max()))
        tol = (2 * float32_tol(scale, decoder_reduction(cfg, keys), decoder_depth(cfg))
               + float32_tol(scale, cfg.vocab_size + 2))
        np.testing.assert_allclose(lp, full.logprobs[0], rtol=0, atol=tol)
        assert np.abs(lp[1:] - full.logprobs[0][:-1]).max() > tol  # one position off


def test_call_shape_is_the_cache_generate_allocates_and_then_keeps(model):
    chunks = [[1] * 30, [2] * 3, [3]]
    B, S = sampler.call_shape(model, [0, 0, 0], [len(c) for c in chunks], buffer_len=16)
    out = sampler.generate(model, chunks, max_new_tokens=4, temperature=0.0, buffer_len=16)
    assert out.state.cache.k.shape[1] == B and out.state.cache.k.shape[CACHE_SEQ_AXIS] == S
    # a kept cache of the shape call_shape gives for the next call is used as it is
    lengths = np.asarray(out.state.lengths, np.int32)
    B2, S2 = sampler.call_shape(model, lengths, [2, 2, 2], buffer_len=16)
    assert (B2, S2) == (B, S)
    again = sampler.generate(model, [[4, 5]] * 3, max_new_tokens=4, temperature=0.0,
                              buffer_len=16, resume=sampler.ResumeState(out.state.cache,
                                                                         lengths))
    assert again.state.cache.k.shape == out.state.cache.k.shape
