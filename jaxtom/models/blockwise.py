"""Blockwise (online-softmax) attention for the training forward: memory linear in row length.

The dense path (`attention.attention`) forms a [B, T, T] mask and fp32 score blocks, so a
16k-token row needs gigabytes per layer before any weight is touched. Here the row is cut
into query and key blocks; each query block walks the key blocks keeping a running max, sum
and output (the softmax is exact, only its summation order differs), and the mask of a
block pair is rebuilt from per-token metadata, never stored whole. Blocks no query can see
(after the query block, or in another packed sequence) are skipped by a `lax.cond`.

The backward pass is written out (`jax.custom_vjp`): it keeps q, k, v, the output and the
per-query log-sum-exp, and recomputes each block's probabilities, so training memory is
linear in T as well (differentiating through the forward's loops would keep every block's
running state instead).

The mask is the training forward's (`Decoder.__call__`): a query sees a key at or before it
in the row whose position is not after its own and whose segment is the query's own or its
`parent_ids` segment (a shared prompt). Pure JAX: it runs on every backend, the CPU and
`jaxtom plan`'s compile-only analysis included.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

NEG = -1e30  # a masked score: finite, so a block with nothing visible never makes NaN


class TokenMeta(NamedTuple):
    """Per-token facts the mask is rebuilt from, each [B, T] int32."""

    index: jax.Array  # place in the row (padding past the row's end is index >= T)
    position: jax.Array  # RoPE position (packed sequences restart it)
    segment: jax.Array  # packed sequence id
    parent: jax.Array  # one more segment the token may read (its own where none)


def token_meta(positions, segment_ids=None, parent_ids=None) -> TokenMeta:
    B, T = positions.shape
    index = jnp.broadcast_to(jnp.arange(T, dtype=jnp.int32), (B, T))
    segment = (jnp.zeros((B, T), jnp.int32) if segment_ids is None
               else jnp.asarray(segment_ids, jnp.int32))
    parent = segment if parent_ids is None else jnp.asarray(parent_ids, jnp.int32)
    return TokenMeta(index, jnp.asarray(positions, jnp.int32), segment, parent)


def visible(q: TokenMeta, k: TokenMeta) -> jax.Array:
    """[B, Tq, Tk]: which keys each query may attend to (the training forward's mask)."""
    before = k.index[:, None, :] <= q.index[:, :, None]
    in_order = k.position[:, None, :] <= q.position[:, :, None]
    same = ((k.segment[:, None, :] == q.segment[:, :, None])
            | (k.segment[:, None, :] == q.parent[:, :, None]))
    return before & in_order & same


def _blocks(x, n, size):
    """[B, n*size, ...] -> [n, B, size, ...]."""
    return jnp.moveaxis(x.reshape(x.shape[0], n, size, *x.shape[2:]), 1, 0)


def _unblocks(x):
    """[n, B, size, ...] -> [B, n*size, ...]."""
    x = jnp.moveaxis(x, 0, 1)
    return x.reshape(x.shape[0], x.shape[1] * x.shape[2], *x.shape[3:])


def _scores(qb, kb, mask, scale):
    """qb [B,bq,K,G,hd], kb [B,bk,K,hd] -> masked fp32 scores [B,K,G,bq,bk]."""
    s = jnp.einsum("bqkgd,bskd->bkgqs", qb, kb, preferred_element_type=jnp.float32) * scale
    return jnp.where(mask[:, None, None], s, NEG)


def _forward(q, k, v, meta, scale):
    """Blocked q [nq,B,bq,K,G,hd], k/v [nk,B,bk,K,hd], meta blocked alike ->
    out [nq,B,K,G,bq,hd] fp32 and lse [nq,B,K,G,bq]."""
    # tie the metadata to q: under a scan over layers, JAX would otherwise hoist every block
    # pair's mask (a function of the loop-invariant metadata alone) out of the loop and
    # stack them all, [nq, nk, B, bq, bk]: the quadratic memory this module exists to avoid
    q, (qm, km) = jax.lax.optimization_barrier((q, meta))

    def one_query_block(args):
        qb, qmeta = args
        B, bq, K, G, hd = qb.shape

        def step(carry, kv):
            kb, vb, kmeta = kv
            mask = visible(qmeta, kmeta)

            def attend(carry):
                m, l, acc = carry
                s = _scores(qb, kb, mask, scale)
                m_new = jnp.maximum(m, s.max(-1))
                p = jnp.exp(s - m_new[..., None]) * mask[:, None, None]
                corr = jnp.exp(m - m_new)
                acc = acc * corr[..., None] + jnp.einsum(
                    "bkgqs,bskd->bkgqd", p.astype(vb.dtype), vb,
                    preferred_element_type=jnp.float32)
                return m_new, l * corr + p.sum(-1), acc

            return jax.lax.cond(mask.any(), attend, lambda c: c, carry), None

        init = (jnp.full((B, K, G, bq), NEG, jnp.float32), jnp.zeros((B, K, G, bq), jnp.float32),
                jnp.zeros((B, K, G, bq, hd), jnp.float32))
        (m, l, acc), _ = jax.lax.scan(step, init, (k, v, km))
        l = jnp.maximum(l, jnp.finfo(jnp.float32).tiny)  # a padding query sees nothing
        return acc / l[..., None], m + jnp.log(l)

    return jax.lax.map(one_query_block, (q, qm))


def _probs(qb, kb, mask, lse, scale):
    return jnp.exp(_scores(qb, kb, mask, scale) - lse[..., None]) * mask[:, None, None]


def _backward(q, k, v, meta, out, lse, dout, scale):
    """Cotangents of blocked q, k, v from the saved output and log-sum-exp (FlashAttention's
    backward: each block's probabilities recomputed, never stored)."""
    dout, (qm, km) = jax.lax.optimization_barrier((dout, meta))  # see `_forward`
    delta = jnp.sum(dout * out, -1)  # [nq,B,K,G,bq]

    def dq_block(args):
        qb, qmeta, lb, dob, db = args

        def step(dq, kv):
            kb, vb, kmeta = kv
            mask = visible(qmeta, kmeta)

            def grad(dq):
                p = _probs(qb, kb, mask, lb, scale)
                dp = jnp.einsum("bkgqd,bskd->bkgqs", dob, vb, preferred_element_type=jnp.float32)
                ds = p * (dp - db[..., None])
                return dq + jnp.einsum("bkgqs,bskd->bqkgd", ds, kb,
                                       preferred_element_type=jnp.float32) * scale

            return jax.lax.cond(mask.any(), grad, lambda d: d, dq), None

        dq, _ = jax.lax.scan(step, jnp.zeros(qb.shape, jnp.float32), (k, v, km))
        return dq

    def dkv_block(args):
        kb, vb, kmeta = args

        def step(carry, qs):
            qb, qmeta, lb, dob, db = qs
            mask = visible(qmeta, kmeta)

            def grad(carry):
                dk, dv = carry
                p = _probs(qb, kb, mask, lb, scale)
                dv = dv + jnp.einsum("bkgqs,bkgqd->bskd", p, dob,
                                     preferred_element_type=jnp.float32)
                dp = jnp.einsum("bkgqd,bskd->bkgqs", dob, vb, preferred_element_type=jnp.float32)
                ds = p * (dp - db[..., None])
                dk = dk + jnp.einsum("bkgqs,bqkgd->bskd", ds, qb,
                                     preferred_element_type=jnp.float32) * scale
                return dk, dv

            return jax.lax.cond(mask.any(), grad, lambda c: c, carry), None

        zeros = jnp.zeros(kb.shape, jnp.float32)
        (dk, dv), _ = jax.lax.scan(step, (zeros, zeros), (q, qm, lse, dout, delta))
        return dk, dv

    dq = jax.lax.map(dq_block, (q, qm, lse, dout, delta))
    dk, dv = jax.lax.map(dkv_block, (k, v, km))
    return dq, dk, dv


@functools.partial(jax.custom_vjp, nondiff_argnums=(4,))
def _attend(q, k, v, meta, scale):
    return _forward(q, k, v, meta, scale)[0]


def _attend_fwd(q, k, v, meta, scale):
    out, lse = _forward(q, k, v, meta, scale)
    return out, (q, k, v, meta, out, lse)


def _attend_bwd(scale, res, dout):
    q, k, v, meta, out, lse = res
    dq, dk, dv = _backward(q, k, v, meta, out, lse, dout.astype(jnp.float32), scale)
    zero_meta = jax.tree.map(lambda x: jnp.zeros(x.shape, jax.dtypes.float0), meta)
    return dq.astype(q.dtype), dk.astype(k.dtype), dv.astype(v.dtype), zero_meta


_attend.defvjp(_attend_fwd, _attend_bwd)


def _pad_meta(meta: TokenMeta, n: int, size: int) -> TokenMeta:
    """Pads [B, T] metadata to n*size tokens; padding sits past every real token in the row
    (index n*size), so no real query sees a padding key."""
    pad = n * size - meta.index.shape[1]
    if not pad:
        return meta
    widths = [(0, 0), (0, pad)]
    return TokenMeta(jnp.pad(meta.index, widths, constant_values=n * size),
                     *(jnp.pad(x, widths) for x in meta[1:]))


def _pad_seq(x, n: int, size: int):
    pad = n * size - x.shape[1]
    return jnp.pad(x, [(0, 0), (0, pad)] + [(0, 0)] * (x.ndim - 2)) if pad else x


def blockwise_attention(q, k, v, meta: TokenMeta, num_kv_heads: int, block: int = 512,
                        key_meta: TokenMeta | None = None):
    """q [B,Tq,H,hd], k/v [B,Tk,K,hd] -> [B,Tq,H*hd] in q's dtype, under `visible`'s mask.

    `meta` describes the queries and, unless `key_meta` is given, the keys too (a training
    row attending to itself); a prefill attending to a KV cache passes the cache slots'
    `key_meta`. `block` tokens per query and key block (the row is padded to a multiple;
    padding keys are never visible, padding queries are dropped)."""
    B, Tq, H, hd = q.shape
    Tk, K = k.shape[1], num_kv_heads
    key_meta = meta if key_meta is None else key_meta
    if k.shape[0] != B or v.shape != k.shape or k.shape[2] != K or H % K:
        raise ValueError(f"blockwise_attention: q {q.shape} and k/v {k.shape}, {v.shape} must "
                         f"share the batch, with {K} kv heads dividing {H} query heads")
    if meta.index.shape != (B, Tq) or key_meta.index.shape != (B, Tk):
        raise ValueError(f"blockwise_attention: metadata {meta.index.shape} / "
                         f"{key_meta.index.shape} must be [batch, seq] of the queries / keys")
    if block <= 0:
        raise ValueError(f"blockwise_attention: block must be positive, got {block}")
    qsize, ksize = min(block, Tq), min(block, Tk)
    nq, nk = -(-Tq // qsize), -(-Tk // ksize)
    qb = _blocks(_pad_seq(q, nq, qsize).reshape(B, nq * qsize, K, H // K, hd), nq, qsize)
    kb, vb = (_blocks(_pad_seq(x, nk, ksize), nk, ksize) for x in (k, v))
    qm = TokenMeta(*(_blocks(x, nq, qsize) for x in _pad_meta(meta, nq, qsize)))
    km = TokenMeta(*(_blocks(x, nk, ksize) for x in _pad_meta(key_meta, nk, ksize)))
    out = _attend(qb, kb, vb, (qm, km), hd ** -0.5)  # [nq,B,K,G,bq,hd]
    out = _unblocks(jnp.transpose(out, (0, 1, 4, 2, 3, 5)))  # [B, nq*qsize, K, G, hd]
    return out[:, :Tq].reshape(B, Tq, H * hd).astype(q.dtype)
