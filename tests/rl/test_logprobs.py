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
from tests.rl.common import TINY, gradient_tol, random_batch
from tests.tolerance import assert_close, decoder_depth, decoder_reduction, is_close


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


def head_tol(h, w, chunk):
    """`reduction`/`scale` of the float32 bound (tests/tolerance.py) between the chunked and
    the plain log-probs and entropies of logits h @ w, both programs' rounding: the logits'
    dot over D; the log-softmax over V, which rounds at the logits' size, and the entropy's
    sum over V again (as for `decision_entropy` in test_losses); per vocabulary chunk the
    online logsumexp's rescale exp(m - m_new) and two more roundings; a few elementwise ops.
    The scale is the logits' terms, max sum_d |h_d w_dv| (the logits may cancel below it),
    plus log V, the log-normaliser's size."""
    D, V = h.shape[-1], w.shape[-1]
    chunks = -(-V // (chunk or V))
    terms = float((jnp.abs(h) @ jnp.abs(w)).max())
    return dict(reduction=D + 2 * V + 2 * chunks + 8, scale=terms + np.log(V))


def head_grad_tol(value_tol, scored, grad):
    """The same for a gradient: forward and backward (depth 2), the backward adding its
    sums over the V logits (the hidden state's gradient) and over the `scored` positions
    (the head's); relative to the gradient's own size times the logits' scale, since
    p = exp(z - logsumexp) turns the logits' absolute error into a relative one."""
    return dict(reduction=value_tol["reduction"] + int(scored), depth=2,
                scale=float(jnp.abs(grad).max()) * value_tol["scale"])


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
    tol = head_tol(h, w, chunk)
    for a, b in zip(want, got):
        assert_close(b, a, **tol)
    assert float(jnp.abs(got[0][:, 0]).max()) == 0.0 and float(jnp.abs(got[1][:, 0]).max()) == 0
    # the targets one position late are caught
    assert not is_close(got[0][:, 1:], plain(h, w, jnp.roll(tokens, 1, axis=1))[0][:, 1:], **tol)

    def loss(fn):
        return lambda h, w: sum(jnp.sum(x * gi) for x, gi in zip(fn(h, w), g))

    want_g = jax.grad(loss(lambda h, w: plain(h, w, tokens)), (0, 1))(h, w)
    got_g = jax.grad(loss(lambda h, w: chunked(h, w, tokens, vocab_axis, chunk)), (0, 1))(h, w)
    for a, b in zip(want_g, got_g):
        assert_close(b, a, **head_grad_tol(tol, tokens[:, 1:].size, a))
    # so is the gradient of the log-probs alone (the entropy's cotangent dropped)
    wrong_g = jax.grad(lambda h, w: jnp.sum(plain(h, w, tokens)[0] * g[0]), (0, 1))(h, w)
    for a, b in zip(want_g, wrong_g):
        assert not is_close(b, a, **head_grad_tol(tol, tokens[:, 1:].size, a))


def test_only_scored_positions_are_computed():
    h, w, tokens, g = inputs(7, T=12)
    scored = np.random.default_rng(1).random(tokens.shape) < 0.4
    scored[0, 0] = True  # nothing predicts a row's first token: never scored
    width = logprobs.bucket_width(int(scored[:, 1:].sum(1).max()), tokens.shape[1])
    keep = scored.copy()
    keep[:, 0] = False
    want, _ = plain(h, w, tokens)
    got, _ = chunked(h, w, tokens, 1, 256, scored=jnp.asarray(scored), width=width)
    tol = head_tol(h, w, 256)
    assert_close(got, np.where(keep, np.asarray(want), 0.0), **tol)
    # an unscored position computed, or a scored one left out, is caught
    assert not is_close(got, np.where(np.roll(keep, 1, axis=1), np.asarray(want), 0.0), **tol)

    def grad(fn):
        return jax.grad(lambda h, w: jnp.sum(jnp.where(keep, fn(h, w), 0.0) * g[0]),
                        (0, 1))(h, w)

    want_g = grad(lambda h, w: plain(h, w, tokens)[0])
    got_g = grad(lambda h, w: chunked(h, w, tokens, 1, 256, scored=jnp.asarray(scored),
                                      width=width)[0])
    for a, b in zip(want_g, got_g):
        assert_close(b, a, **head_grad_tol(tol, keep.sum(), a))


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
    learner = rl.Learner(model, rl.StepConfig(reference="none", kl_coef=0.0), total_steps=1000)
    batch = jax.tree.map(jnp.asarray, random_batch(2, prediction=False))
    width, _ = rl.widths.score_widths(batch)
    graphdef, params, frozen = learner._split(model)
    scored = rl.widths.scored_positions(batch)
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
    # a decoder forward (tests/tolerance.py) then the log-softmax and the entropy's sum over
    # V at the logits' size; the gradients within the tiny model's loss-gradient bound
    # (tests/rl/common.py), each relative to its own size
    V, T = TINY.vocab_size, batch.tokens.shape[1]
    logits = nnx.merge(graphdef, params, frozen)(batch.tokens, batch.positions, batch.segment_ids)
    tol = dict(reduction=decoder_reduction(TINY, T) + 2 * V + 8, depth=decoder_depth(TINY),
               scale=float(jnp.abs(logits).max()) + np.log(V))
    assert_close(got[0], want[0], **tol)
    decision = np.asarray(batch.decision_mask) > 0
    assert_close(np.asarray(got[1])[decision], np.asarray(want[1])[decision], **tol)
    assert not is_close(got[0][:, 1:], want[0][:, :-1], **tol)  # one position off
    grad = gradient_tol(TINY, seq_len=T, tokens=batch.tokens.size)
    for a, b in zip(jax.tree.leaves(want_g), jax.tree.leaves(got_g)):
        assert_close(b, a, **grad)
