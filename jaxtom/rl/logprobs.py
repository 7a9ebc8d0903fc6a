"""Token log-probs (and entropies) from the final hidden states, one vocabulary chunk at a time.

The LM head's logits are a training step's largest array: float32 [B, T, V] is ~5 GB for one
8k-token row at Qwen3's 151,936-token vocabulary, and its gradient is as large again. Here the
head and the log-softmax are one function with a custom VJP: the forward keeps a running
(online) logsumexp over vocabulary chunks, and the backward recomputes each chunk's logits to
form its share of the hidden-state and head gradients, so at most one [N, chunk] block of
logits exists at a time. Only positions a loss reads are scored (`token_logprobs_from_hidden`
with `scored`), so prompt positions cost no head or softmax work.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

# one chunk's float32 logits may take this many bytes; chunks are at least MIN_CHUNK wide.
CHUNK_BYTES = 16 * 2**20
MIN_CHUNK = 256


def chunk_size(rows: int, vocab: int, budget: int | None = None) -> int:
    """Vocabulary entries per chunk so that [rows, chunk] float32 logits fit in `budget`
    bytes (default CHUNK_BYTES)."""
    fit = (CHUNK_BYTES if budget is None else budget) // (4 * max(rows, 1))
    return int(min(vocab, max(MIN_CHUNK, fit // 128 * 128)))


def bucket_width(count: int, length: int) -> int:
    """`count` scored positions per row rounded up to a multiple of length/8 (at least 8),
    within [1, length]: the width is static, so a run compiles at most ~9 programs per
    batch shape however its completion lengths vary."""
    q = max(8, (1 << max(int(length) - 1, 0).bit_length()) // 8)
    return int(max(1, min(length, -(-int(count) // q) * q)))


def _logits(h, w, vocab_axis):
    """[N, C] float32 logits of one chunk `w` ([C, D] if vocab_axis is 0, else [D, C]); the
    matmul runs in h's dtype, as the decoder's own head does."""
    dims = (((1,), (1 - vocab_axis,)), ((), ()))
    return jax.lax.dot_general(h, w.astype(h.dtype), dims).astype(jnp.float32)


def _over_chunks(body, carry, head, vocab_axis, chunk):
    """Folds `body(carry, head_chunk, start)` over the vocabulary: a scan over the full chunks
    (dynamic slices, no copy of the head) and one static tail for a remainder."""
    vocab = head.shape[vocab_axis]
    n, tail = divmod(vocab, chunk)
    if n == 1:
        carry = body(carry, jax.lax.slice_in_dim(head, 0, chunk, axis=vocab_axis), 0)
    elif n > 1:
        def step(c, i):
            start = i * chunk
            return body(c, jax.lax.dynamic_slice_in_dim(head, start, chunk, vocab_axis),
                        start), None
        carry, _ = jax.lax.scan(step, carry, jnp.arange(n, dtype=jnp.int32))
    if tail:
        carry = body(carry, jax.lax.slice_in_dim(head, n * chunk, vocab, axis=vocab_axis),
                     n * chunk)
    return carry


def _hit(targets, start, width):
    return (targets - start)[:, None] == jnp.arange(width, dtype=targets.dtype)[None, :]


def _init(n):
    """Running (max, sum of e^(z - max), entropy sum, target logit), each [n]. The max starts
    at a finite floor rather than -inf, so (m - m_new) * s is 0 on the first chunk, not NaN."""
    return (jnp.full((n,), jnp.finfo(jnp.float32).min), jnp.zeros(n), jnp.zeros(n),
            jnp.zeros(n))


def _fold(c, z, start, targets, with_entropy):
    """The running statistics after one more chunk of logits z [n, C] (vocabulary ids from
    `start`): an online logsumexp."""
    m, s, t, picked = c
    m_new = jnp.maximum(m, jnp.max(z, axis=-1))
    scale = jnp.exp(m - m_new)
    e = jnp.exp(z - m_new[:, None])
    s_new = s * scale + jnp.sum(e, axis=-1)
    if with_entropy:  # t = sum e^(z-m) (z-m), kept relative to the running max
        t = scale * (t + (m - m_new) * s) + jnp.sum(e * (z - m_new[:, None]), axis=-1)
    picked = picked + jnp.sum(jnp.where(_hit(targets, start, z.shape[1]), z, 0.0), axis=-1)
    return m_new, s_new, t, picked


def _forward(h, head, targets, vocab_axis, chunk, with_entropy):
    """(logp, entropy or None, logsumexp), each [N] float32, and the [N, V] logits when one
    chunk holds the whole vocabulary (else None)."""
    z = None
    if chunk >= head.shape[vocab_axis]:
        z = _logits(h, head, vocab_axis)
        m, s, t, picked = _fold(_init(h.shape[0]), z, 0, targets, with_entropy)
    else:
        m, s, t, picked = _over_chunks(
            lambda c, w, start: _fold(c, _logits(h, w, vocab_axis), start, targets,
                                      with_entropy),
            _init(h.shape[0]), head, vocab_axis, chunk)
    lse = m + jnp.log(s)
    return picked - lse, (jnp.log(s) - t / s if with_entropy else None), lse, z


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4, 5))
def head_logprobs(hidden, head, targets, vocab_axis: int, chunk: int, with_entropy: bool):
    """log p(targets | hidden) [N] (and the entropy [N], else None) under the LM head.

    hidden [N, D] (after the final norm); head [V, D] for a tied embedding (`vocab_axis` 0)
    or [D, V] for an lm_head (1); targets [N] int. Logits are `hidden @ head` in hidden's
    dtype, read as float32, `chunk` vocabulary entries at a time.
    """
    logp, entropy, _, _ = _forward(hidden, head, targets, vocab_axis, chunk, with_entropy)
    return logp, entropy


def _head_logprobs_fwd(hidden, head, targets, vocab_axis, chunk, with_entropy):
    # one chunk holds the whole vocabulary: its logits (within the chunk budget) are kept
    # rather than recomputed, a matmul as large as the forward's
    logp, entropy, lse, logits = _forward(hidden, head, targets, vocab_axis, chunk,
                                          with_entropy)
    return (logp, entropy), (hidden, head, targets, lse, entropy, logits)


def _head_logprobs_bwd(vocab_axis, chunk, with_entropy, res, cts):
    h, head, targets, lse, entropy, logits = res
    g_logp, g_entropy = cts
    g_logp = g_logp.astype(jnp.float32)[:, None]

    def fold(c, w, start):
        dh, dw = c
        z = _logits(h, w, vocab_axis) if logits is None else logits
        p = jnp.exp(z - lse[:, None])
        # d logp / dz = onehot - p;  d entropy / dz = -p (log p + entropy)
        dz = jnp.where(_hit(targets, start, z.shape[1]), g_logp, 0.0) - g_logp * p
        if with_entropy:
            dz = dz - g_entropy[:, None] * p * (z - lse[:, None] + entropy[:, None])
        dz = dz.astype(h.dtype)
        wc = w.astype(h.dtype)
        dh = dh + jax.lax.dot_general(dz, wc, (((1,), (vocab_axis,)), ((), ())),
                                      preferred_element_type=jnp.float32)
        # the head's gradient with the small operand (h) on the contracted side
        if vocab_axis == 0:
            dwc = jax.lax.dot_general(dz, h, (((0,), (0,)), ((), ())))  # [C, D]
        else:
            dwc = jax.lax.dot_general(h, dz, (((0,), (0,)), ((), ())))  # [D, C]
        dw = jax.lax.dynamic_update_slice_in_dim(dw, dwc.astype(dw.dtype), start, vocab_axis)
        return dh, dw

    init = (jnp.zeros(h.shape, jnp.float32), jnp.zeros(head.shape, head.dtype))
    dh, dw = _over_chunks(fold, init, head, vocab_axis, chunk)
    return dh.astype(h.dtype), dw, np.zeros(targets.shape, jax.dtypes.float0)


head_logprobs.defvjp(_head_logprobs_fwd, _head_logprobs_bwd)


def scored_positions(scored: jax.Array, width: int) -> jax.Array:
    """[B, width] positions of each row's scored entries, in order; rows with fewer are
    filled with unscored positions (their results are discarded). Entry 0 is never scored:
    nothing in the row predicts it."""
    scored = jnp.asarray(scored).at[:, 0].set(False)
    return jnp.argsort(~scored, axis=1, stable=True)[:, :width].astype(jnp.int32)


def token_logprobs_from_hidden(hidden: jax.Array, head: jax.Array, tokens: jax.Array, *,
                               vocab_axis: int, scored: jax.Array | None = None,
                               width: int | None = None, entropy: bool = False,
                               chunk: int | None = None):
    """log p(tokens[t] | tokens[<t]) [B, T] aligned with `tokens`, like `losses.token_logprobs`
    on the decoder's logits, and the next-token entropies [B, T] if `entropy` (else None).

    `hidden` [B, T, D] are the final (normed) hidden states, `head` the LM-head weight (see
    `head_logprobs`). With `scored` [B, T] (bool) and a static `width` at least the number of
    scored entries in any row, only those entries are computed; every other entry is 0.
    Without them every entry but the first is computed.
    """
    with jax.named_scope("lm_head"):
        return _token_logprobs(hidden, head, tokens, vocab_axis, scored, width, entropy, chunk)


def _token_logprobs(hidden, head, tokens, vocab_axis, scored, width, entropy, chunk):
    B, T, D = hidden.shape
    if scored is None:
        h, targets = hidden[:, :-1], tokens[:, 1:]
    else:
        width = int(min(width, T))
        pos = scored_positions(scored, width)
        valid = jnp.take_along_axis(jnp.asarray(scored), pos, axis=1) & (pos > 0)
        h = jnp.take_along_axis(hidden, jnp.maximum(pos - 1, 0)[..., None], axis=1)
        targets = jnp.take_along_axis(tokens, pos, axis=1)
    n = h.shape[0] * h.shape[1]
    vocab = head.shape[vocab_axis]
    chunk = chunk_size(n, vocab) if chunk is None else int(min(chunk, vocab))
    logp, ent = head_logprobs(h.reshape(n, D), head, targets.reshape(n).astype(jnp.int32),
                              vocab_axis, chunk, entropy)
    outs = (logp, ent) if entropy else (logp,)
    if scored is None:
        full = [jnp.pad(x.reshape(B, T - 1), ((0, 0), (1, 0))) for x in outs]
    else:
        rows = jnp.arange(B)[:, None]
        full = [jnp.zeros((B, T), jnp.float32).at[rows, pos].set(
            jnp.where(valid, x.reshape(B, width), 0.0)) for x in outs]
    return full[0], (full[1] if entropy else None)
