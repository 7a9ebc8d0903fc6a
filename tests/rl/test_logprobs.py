"""Chunked log-probs from hidden states against plain JAX on full logits: values, entropies and
gradients, tied and untied heads, ragged vocabularies; and no [N, V] array in the program."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxtom import rl
from jaxtom.models import init_decoder
from jaxtom.rl import logprobs
from tests.rl.common import TINY, random_batch

EPS = float(np.finfo(np.float32).eps)


def inputs(seed, B=3, T=9, D=16, V=1000):
    rng = np.random.default_rng(seed)
    h = jnp.asarray(rng.normal(size=(B, T, D)), jnp.float32)
    w = jnp.asarray(rng.normal(size=(D, V)) * 0.7, jnp.float32)  # logits of scale ~3
    tokens = jnp.asarray(rng.integers(0, V, (B, T)), jnp.int32)
    g = jnp.asarray(rng.normal(size=(2, B, T)), jnp.float32)  # cotangents: logp, entropy
    return h, w, tokens, g


def plain(h, w, tokens):
    """The decoder's logits and the existing full-logits functions."""
    z = (h @ w).astype(jnp.float32)
    return rl.token_logprobs(z, tokens), rl.token_entropy(z)


def tolerance(scale, V):
    """float32 rounding of a V-term reduction, a few ulps per term's share, times its scale."""
    return 8 * EPS * np.sqrt(V) * max(float(scale), 1.0)


def chunked(h, w, tokens, vocab_axis, chunk, **kw):
    head = w if vocab_axis == 1 else w.T  # tied embeddings are [V, D]
    return logprobs.token_logprobs_from_hidden(h, head, tokens, vocab_axis=vocab_axis,
                                               entropy=True, chunk=chunk, **kw)


@pytest.mark.parametrize("vocab_axis", [0, 1], ids=["tied", "lm_head"])
@pytest.mark.parametrize("V,chunk", [(1000, 256), (1024, 256), (500, None), (1000, 999)],
                         ids=["ragged", "even", "one-chunk", "tiny-tail"])
def test_values_and_gradients_match_full_logits(vocab_axis, V, chunk):
    h, w, tokens, g = inputs(V + (chunk or 0), V=V)
    want = plain(h, w, tokens)
    got = chunked(h, w, tokens, vocab_axis, chunk)
    zmax = float(jnp.abs(h @ w).max())
    for a, b in zip(want, got):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=0,
                                   atol=tolerance(zmax + np.log(V), V))
    assert float(jnp.abs(got[0][:, 0]).max()) == 0.0 and float(jnp.abs(got[1][:, 0]).max()) == 0

    def loss(fn):
        return lambda h, w: sum(jnp.sum(x * gi) for x, gi in zip(fn(h, w), g))

    want_g = jax.grad(loss(lambda h, w: plain(h, w, tokens)), (0, 1))(h, w)
    got_g = jax.grad(loss(lambda h, w: chunked(h, w, tokens, vocab_axis, chunk)), (0, 1))(h, w)
    for a, b in zip(want_g, got_g):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=0,
                                   atol=tolerance(jnp.abs(a).max() * zmax, V))


def test_only_scored_positions_are_computed():
    h, w, tokens, g = inputs(7, T=12)
    scored = np.random.default_rng(1).random(tokens.shape) < 0.4
    scored[0, 0] = True  # nothing predicts a row's first token: never scored
    width = logprobs.bucket_width(int(scored[:, 1:].sum(1).max()), tokens.shape[1])
    keep = scored.copy()
    keep[:, 0] = False
    want, _ = plain(h, w, tokens)
    got, _ = chunked(h, w, tokens, 1, 256, scored=jnp.asarray(scored), width=width)
    np.testing.assert_allclose(np.asarray(got), np.where(keep, np.asarray(want), 0.0), rtol=0,
                               atol=tolerance(jnp.abs(h @ w).max() + 7, 1000))

    def grad(fn):
        return jax.grad(lambda h, w: jnp.sum(jnp.where(keep, fn(h, w), 0.0) * g[0]),
                        (0, 1))(h, w)

    want_g = grad(lambda h, w: plain(h, w, tokens)[0])
    got_g = grad(lambda h, w: chunked(h, w, tokens, 1, 256, scored=jnp.asarray(scored),
                                      width=width)[0])
    for a, b in zip(want_g, got_g):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=0,
                                   atol=tolerance(jnp.abs(a).max() * 10, 1000))


def largest_array(fn, *args) -> int:
    """Most elements of any value in `fn`'s jaxpr, sub-jaxprs (scan bodies) included."""
    def walk(jaxpr):
        sizes = [np.prod(v.aval.shape, dtype=np.int64) for v in jaxpr.invars + jaxpr.outvars
                 if hasattr(v.aval, "shape")]
        for eqn in jaxpr.eqns:
            sizes += [np.prod(v.aval.shape, dtype=np.int64) for v in eqn.outvars]
            for value in eqn.params.values():
                for sub in value if isinstance(value, (tuple, list)) else (value,):
                    sub = getattr(sub, "jaxpr", sub)  # closed jaxprs wrap one
                    if hasattr(sub, "eqns"):
                        sizes.append(walk(sub))
        return max(sizes, default=0)
    return int(walk(jax.make_jaxpr(fn)(*args).jaxpr))


def test_no_value_holds_a_full_logits_block():
    B, T, D, V, chunk = 4, 32, 8, 4096, 512
    h, w, tokens, g = inputs(3, B=B, T=T, D=D, V=V)
    scored = jnp.zeros((B, T), bool).at[:, T // 2:].set(True)

    def loss(fn):
        return jax.value_and_grad(lambda h, w: jnp.sum(fn(h, w)[0] * g[0]), (0, 1))

    new = loss(lambda h, w: chunked(h, w, tokens, 1, chunk, scored=scored, width=T // 2))
    old = loss(lambda h, w: plain(h, w, tokens))
    assert largest_array(old, h, w) >= B * (T - 1) * V  # the check sees full logits
    assert largest_array(new, h, w) <= B * (T // 2) * chunk  # one chunk of scored rows


def test_width_buckets_are_few_and_cover_the_count():
    for T in (16, 96, 1000, 8192):
        widths = [logprobs.bucket_width(c, T) for c in range(T + 1)]
        assert all(w >= min(c, T) and 1 <= w <= T for c, w in enumerate(widths))
        assert len(set(widths)) <= 9
    assert logprobs.bucket_width(64, 96) == 64
    assert logprobs.chunk_size(512, 151_936) < 151_936 <= 512 * 2**20


@pytest.mark.parametrize("tied", [False, True], ids=["lm_head", "tied"])
def test_learner_log_probs_equal_the_full_logits(tied):
    """The step's path (decoder hidden states + chunked head on scored positions) against
    `token_logprobs` on the decoder's logits, values and parameter gradients."""
    model = init_decoder(TINY.replace(tie_word_embeddings=tied), seed=1)
    learner = rl.Learner(model, rl.StepConfig(reference="none", kl_coef=0.0))
    batch = jax.tree.map(jnp.asarray, random_batch(2, prediction=False))
    width, _ = rl.step.score_widths(batch)
    graphdef, params, frozen = learner._split(model)
    scored = rl.step._scored(batch)
    weight = jnp.where(scored.at[:, 0].set(False), batch.advantages, 0.0)

    def new(params):
        logp, ent = learner._logprobs(params, frozen, batch.tokens, batch.positions,
                                      batch.segment_ids, scored, width, entropy=True)
        return jnp.sum(logp * weight) + jnp.sum(ent * batch.decision_mask), (logp, ent)

    def old(params):
        model = nnx.merge(graphdef, params, frozen)
        logits = model(batch.tokens, batch.positions, batch.segment_ids)
        logp, ent = rl.token_logprobs(logits, batch.tokens), rl.token_entropy(logits)
        logp, ent = jnp.where(weight != 0, logp, 0.0), jnp.where(scored, ent, 0.0)
        return jnp.sum(logp * weight) + jnp.sum(ent * batch.decision_mask), (logp, ent)

    (_, got), got_g = jax.jit(jax.value_and_grad(new, has_aux=True))(params)
    (_, want), want_g = jax.jit(jax.value_and_grad(old, has_aux=True))(params)
    V = TINY.vocab_size
    np.testing.assert_allclose(np.asarray(got[0]), np.asarray(want[0]), rtol=0,
                               atol=tolerance(20, V))
    decision = np.asarray(batch.decision_mask) > 0
    np.testing.assert_allclose(np.asarray(got[1])[decision], np.asarray(want[1])[decision],
                               rtol=0, atol=tolerance(20, V))
    for a, b in zip(jax.tree.leaves(want_g), jax.tree.leaves(got_g)):
        np.testing.assert_allclose(np.asarray(b), np.asarray(a), rtol=0,
                                   atol=tolerance(20 * float(jnp.abs(a).max()), V))
