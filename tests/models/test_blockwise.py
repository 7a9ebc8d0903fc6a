"""Blockwise (online-softmax) attention (`jaxtom.models.blockwise`).

It must give the dense path's outputs and gradients to float32 rounding on the rows training
packs (several sequences, a shared prompt read through `parent_ids`, padding), its hand-written
backward included, and its memory must be what it is for: no [T, T] array in the program, and
a compiled training step whose temporaries grow linearly with the row, not quadratically.
"""

import dataclasses

import jax
import jax.extend.core as jax_core
import jax.numpy as jnp
import numpy as np
import pytest

from jaxtom.models import attention, blockwise, decoder, init_decoder
from jaxtom.plan_shapes import xla_memory
from tests.models.test_query_blocks import (CFG, assert_same_forward, packed_forward,
                                             row_mask, shared_prompt_row)
from tests.tolerance import assert_close, decoder_depth, decoder_reduction, is_close


def batch_meta(batch):
    return blockwise.token_meta(jnp.asarray(batch.positions), jnp.asarray(batch.segment_ids),
                                jnp.asarray(batch.parent_ids))


def test_visible_is_the_training_forwards_mask():
    batch = shared_prompt_row()
    meta = batch_meta(batch)
    np.testing.assert_array_equal(blockwise.visible(meta, meta), row_mask(batch))


@pytest.mark.parametrize("block", [37, 512])  # several ragged blocks; one block larger than T
def test_values_and_gradients_equal_dense_attention(block):
    batch = shared_prompt_row()
    meta, mask = batch_meta(batch), row_mask(batch)
    T = mask.shape[1]
    keys = jax.random.split(jax.random.key(1), 4)
    q = jax.random.normal(keys[0], (1, T, CFG.num_heads, CFG.head_dim))
    k = jax.random.normal(keys[1], (1, T, CFG.num_kv_heads, CFG.head_dim))
    v = jax.random.normal(keys[2], (1, T, CFG.num_kv_heads, CFG.head_dim))
    w = jax.random.normal(keys[3], (1, T, CFG.num_heads * CFG.head_dim))
    dense = lambda q, k, v: attention.attention(q, k, v, mask, CFG)  # noqa: E731
    blocked = jax.jit(lambda q, k, v: blockwise.blockwise_attention(
        q, k, v, meta, CFG.num_kv_heads, block))
    assert_close(blocked(q, k, v), dense(q, k, v), reduction=2 * T + 8)

    def grads(fn):
        return jax.grad(lambda *a: jnp.sum(jnp.tanh(fn(*a)) * w), argnums=(0, 1, 2))(q, k, v)

    for a, b in zip(grads(blocked), grads(dense)):
        assert_close(a, b, reduction=4 * T + 16, depth=2)
    # the comparison can fail: attending one key block too few is far outside it
    short = blockwise.blockwise_attention(q, k, v, meta._replace(
        index=jnp.where(meta.index < 20, meta.index, meta.index - 20)), CFG.num_kv_heads, 16)
    assert not is_close(short, dense(q, k, v), reduction=2 * T + 8)


def test_decoder_blockwise_equals_dense_on_packed_rows():
    batch = shared_prompt_row()

    def run(mode):
        return packed_forward(init_decoder(CFG.replace(attention=mode, attention_block=32),
                                           seed=3), batch)

    assert_same_forward(run("blockwise"), run("dense"), batch.tokens.shape[1])


def test_auto_switches_to_blockwise_only_for_long_rows():
    cfg = CFG.replace(attention_block=64)
    assert not cfg.blockwise_attention(512) and cfg.blockwise_attention(513)
    assert cfg.replace(attention="blockwise").blockwise_attention(8)
    assert not cfg.replace(attention="dense").blockwise_attention(10**6)
    with pytest.raises(ValueError, match="attention must be one of"):
        CFG.replace(attention="flash")
    with pytest.raises(ValueError, match="attention_block must be a positive int"):
        CFG.replace(attention_block=0)


def _train_step_memory(cfg, T):
    model = init_decoder(cfg, seed=0)
    tokens = jnp.ones((1, T), jnp.int32)

    def loss(m):
        return jnp.mean(m(tokens, segment_ids=jnp.zeros((1, T), jnp.int32)) ** 2)

    from flax import nnx
    graph, state = nnx.split(model)
    step = jax.jit(lambda s: jax.grad(lambda s: loss(nnx.merge(graph, s)))(s))
    return step, state


def test_no_square_array_and_linear_training_memory():
    """Deep enough that the layers run as a scan (as every real model does): there, JAX
    would hoist the loop-invariant block masks out of the loop and stack all [nq, nk] of
    them unless the metadata is tied to the queries (`blockwise._forward`)."""
    cfg = dataclasses.replace(CFG, attention="blockwise", attention_block=128,
                              num_layers=decoder.UNROLL_MAX_LAYERS + 1)
    T = 1024
    step, state = _train_step_memory(cfg, T)
    sizes = []

    def walk(jp):
        for eqn in jp.eqns:
            for var in eqn.outvars:
                if hasattr(var.aval, "shape"):
                    sizes.append((int(np.prod(var.aval.shape)), tuple(var.aval.shape)))
            for sub in jax_core.jaxprs_in_params(eqn.params):
                walk(sub)

    walk(jax.make_jaxpr(step)(state).jaxpr)
    # a [T, T]-sized array of score blocks (two block-sized axes): the quadratic memory
    square = [s for s in sizes if s[0] >= T * T // 8 and sum(d >= 128 for d in s[1]) >= 2]
    assert not square, square
    temps = {}
    for mode in ("blockwise", "dense"):
        for length in (1024, 4096):
            step, state = _train_step_memory(cfg.replace(attention=mode), length)
            temps[mode, length] = xla_memory(step.lower(state).compile())["temporaries"]
    # 4x the row: blockwise temporaries grow ~4x (activations), dense ones ~16x (scores)
    assert temps["blockwise", 4096] < 6 * temps["blockwise", 1024], temps
    assert temps["dense", 4096] > 10 * temps["dense", 1024], temps
    assert temps["blockwise", 4096] * 8 < temps["dense", 4096], temps


def test_long_prefill_attends_blockwise_and_equals_dense():
    """A prefill longer than the block attends over the cache's slots blockwise; logits and
    the cache it writes equal the dense path's, with rows written at different starts."""
    from jaxtom.models.decoder import KVCache
    T, S = 70, 112
    tokens = jax.random.randint(jax.random.key(2), (2, T), 1, CFG.vocab_size)
    starts = jnp.array([0, 30])

    def run(mode):
        model = init_decoder(CFG.replace(attention=mode, attention_block=16), seed=4)
        return model.forward_cached(tokens, KVCache.zeros(model.config, 2, S), starts)

    (lb, cb), (ld, cd) = run("blockwise"), run("dense")
    red, depth = decoder_reduction(CFG, S), decoder_depth(CFG)
    assert_close(lb, ld, reduction=red, depth=depth)
    assert_close(cb.k, cd.k, reduction=red, depth=depth)
    assert CFG.replace(attention_block=8).blockwise_attention(T)  # auto: past 8 blocks
