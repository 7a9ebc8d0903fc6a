"""Dense grouped-query attention under an explicit mask: the decode and short-row path
(`jaxtom.models.blockwise` is the long-row one), and the training forward's query blocks."""

from __future__ import annotations

import jax
import jax.numpy as jnp

from jaxtom.models.config import ModelConfig

# The training forward computes attention a block of queries at a time, each block against the
# keys up to its own end: in a row-causal mask the keys after a block are all masked, so about
# half the score matrix is never formed (the result is the same). Blocks are at least
# QUERY_BLOCK queries, and a row has at most MAX_QUERY_BLOCKS of them (a bounded program size).
QUERY_BLOCK = 32
MAX_QUERY_BLOCKS = 8


def attention(q, k, v, mask, cfg: ModelConfig, heads_first: bool = False) -> jax.Array:
    """Grouped-query attention; q [B,T,H,hd], k/v [B,S,K,hd], mask [B,T,S] -> [B,T,H*hd].

    `heads_first`: k/v are laid out [B,K,S,hd] (the KV cache's layout).
    """
    B, T = q.shape[:2]
    K, G = cfg.num_kv_heads, cfg.num_heads // cfg.num_kv_heads
    q = q.reshape(B, T, K, G, cfg.head_dim)
    kv = "bksd" if heads_first else "bskd"
    scores = jnp.einsum(f"btkgd,{kv}->bkgts", q, k).astype(jnp.float32)
    scores = scores * (cfg.head_dim ** -0.5)
    scores = jnp.where(mask[:, None, None], scores, jnp.finfo(jnp.float32).min)
    probs = jax.nn.softmax(scores, axis=-1).astype(v.dtype)
    # heads-major output, then one transpose: asked for [B, T, K, G, hd] directly, XLA:CPU
    # swaps the operands and runs the product as a transposed Eigen dot over the cache
    # (a quarter of the tiny model's decode step); this way it is a plain GEMM.
    out = jnp.einsum(f"bkgts,{kv}->bkgtd", probs, v)
    return out.transpose(0, 3, 1, 2, 4).reshape(B, T, cfg.num_heads * cfg.head_dim)


def query_blocks(length: int) -> list[tuple[int, int]]:
    """Static [start, end) query blocks of a `length`-token row (see QUERY_BLOCK)."""
    size = max(QUERY_BLOCK, -(-length // MAX_QUERY_BLOCKS))
    return [(a, min(length, a + size)) for a in range(0, length, size)]


def attended_keys(length: int) -> float:
    """Keys each query's scores span on average under `causal_attention` (FLOP counts)."""
    return sum((b - a) * b for a, b in query_blocks(length)) / max(length, 1)


def causal_attention(q, k, v, mask, cfg: ModelConfig) -> jax.Array:
    """`attention` for a mask with no key after its query in the row (q, k, v of one row
    order): each query block attends only to the keys up to its end. The skipped scores are
    all masked, so the result equals `attention`'s."""
    blocks = query_blocks(q.shape[1])
    if len(blocks) == 1:
        return attention(q, k, v, mask, cfg)
    return jnp.concatenate([attention(q[:, a:b], k[:, :b], v[:, :b], mask[:, a:b, :b], cfg)
                            for a, b in blocks], axis=1)
