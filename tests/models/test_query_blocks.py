"""Blocked causal attention in the training forward (`attention.causal_attention`).

Each block of queries attends only to the keys up to its own end; in a row-causal mask every
skipped score is masked, so outputs and gradients must equal full attention's to float32
rounding, on packed rows with shared prompts too. And the blocking must be real: no
[T, T] float score matrix may be formed.
"""

import jax
import jax.extend.core as jax_core
import jax.numpy as jnp
import numpy as np
import pytest

from jaxtom.models import attention, init_decoder
from jaxtom.models.config import ModelConfig
from jaxtom.rl.batch import pack_shared_prompts
from tests.tolerance import assert_close, decoder_depth, decoder_reduction

CFG = ModelConfig(family="qwen3", vocab_size=64, hidden_size=32, intermediate_size=64,
                  num_layers=2, num_heads=4, num_kv_heads=2, head_dim=8, qk_norm=True)


@pytest.mark.parametrize("length", [1, 5, 31, 32, 33, 96, 150, 257, 576, 4097])
def test_query_blocks_tile_the_row(length):
    blocks = attention.query_blocks(length)
    assert blocks[0][0] == 0 and blocks[-1][1] == length
    assert all(a < b for a, b in blocks)
    assert all(b == a2 for (_, b), (a2, _) in zip(blocks, blocks[1:]))  # contiguous
    assert len(blocks) <= attention.MAX_QUERY_BLOCKS
    assert all(b - a >= attention.QUERY_BLOCK for a, b in blocks[:-1])
    full = sum((b - a) * b for a, b in blocks) / length
    assert attention.attended_keys(length) == pytest.approx(full)
    assert attention.attended_keys(length) <= length
    if length > attention.QUERY_BLOCK:
        assert attention.attended_keys(length) < length


def shared_prompt_row():
    """One packed row: two groups, each prompt once and then its completions (`parent_ids`),
    padding at the end: 150 entries, so the row spans several query blocks."""
    rng = np.random.default_rng(0)
    seqs, masks, prompt_lens, groups = [], [], [], []
    for g, (P, lengths) in enumerate([(20, [9, 30, 14]), (17, [25, 6])]):
        prompt = list(rng.integers(1, CFG.vocab_size, P))
        for n in lengths:
            seqs.append(prompt + list(rng.integers(1, CFG.vocab_size, n)))
            masks.append([0.0] * P + [1.0] * n)
            prompt_lens.append(P)
            groups.append(g)
    return pack_shared_prompts(seqs, masks, [1.0] * len(seqs), groups, prompt_lens,
                               num_rows=1, row_len=150)


def row_mask(batch):
    positions, seg, par = (jnp.asarray(x) for x in (batch.positions, batch.segment_ids,
                                                    batch.parent_ids))
    T = positions.shape[1]
    mask = (positions[:, None, :] <= positions[:, :, None]) & jnp.tril(jnp.ones((T, T), bool))
    same = (seg[:, None, :] == seg[:, :, None]) | (seg[:, None, :] == par[:, :, None])
    return mask & same


def test_causal_attention_equals_full_attention_values_and_gradients():
    batch = shared_prompt_row()
    mask = row_mask(batch)
    T = mask.shape[1]
    assert len(attention.query_blocks(T)) > 1
    keys = jax.random.split(jax.random.key(1), 4)
    q = jax.random.normal(keys[0], (1, T, CFG.num_heads, CFG.head_dim))
    k = jax.random.normal(keys[1], (1, T, CFG.num_kv_heads, CFG.head_dim))
    v = jax.random.normal(keys[2], (1, T, CFG.num_kv_heads, CFG.head_dim))
    w = jax.random.normal(keys[3], (1, T, CFG.num_heads * CFG.head_dim))

    def loss(fn, q, k, v):
        return jnp.sum(fn(q, k, v, mask, CFG) * w)

    full = attention.attention(q, k, v, mask, CFG)
    blocked = attention.causal_attention(q, k, v, mask, CFG)
    # a softmax over T keys, then a T-term sum of values
    assert_close(blocked, full, reduction=2 * T + 8)
    g_full = jax.grad(lambda *a: loss(attention.attention, *a), argnums=(0, 1, 2))(q, k, v)
    g_blocked = jax.grad(lambda *a: loss(attention.causal_attention, *a),
                         argnums=(0, 1, 2))(q, k, v)
    for a, b in zip(g_blocked, g_full):
        assert_close(a, b, reduction=4 * T + 16, depth=2)


def packed_forward(model, batch):
    """(logits, gradient leaves) of `model` on a packed shared-prompt row (`shared_prompt_row`):
    what two attention paths must agree on."""
    args = (jnp.asarray(batch.tokens), jnp.asarray(batch.positions),
            jnp.asarray(batch.segment_ids))
    kw = {"parent_ids": jnp.asarray(batch.parent_ids)}
    logits = model(*args, **kw)
    grads = jax.grad(lambda m: jnp.sum(m(*args, **kw)[..., :8] ** 2))(model)
    return logits, jax.tree.leaves(grads)


def assert_same_forward(got, want, length: int) -> None:
    """`packed_forward` results equal to float32 rounding (tolerances from CFG's depth)."""
    red, depth = decoder_reduction(CFG, length), decoder_depth(CFG)
    assert_close(got[0], want[0], reduction=red, depth=depth)
    for a, b in zip(got[1], want[1]):
        assert_close(a, b, reduction=red, depth=2 * depth)


def test_decoder_forward_equals_unblocked_on_packed_rows(monkeypatch):
    batch = shared_prompt_row()
    model = init_decoder(CFG, seed=3)
    blocked = packed_forward(model, batch)
    monkeypatch.setattr(attention, "QUERY_BLOCK", 10**6)  # one block: full attention
    assert len(attention.query_blocks(150)) == 1
    assert_same_forward(blocked, packed_forward(model, batch), batch.tokens.shape[1])


def test_no_full_score_matrix_is_formed():
    T = 128
    model = init_decoder(CFG, seed=0)
    tokens = jnp.ones((2, T), jnp.int32)

    def loss(m):
        return jnp.sum(m(tokens) ** 2)

    jaxpr = jax.make_jaxpr(jax.grad(loss))(model)
    shapes = set()

    def walk(jp):
        for eqn in jp.eqns:
            for var in eqn.outvars:
                aval = var.aval
                if hasattr(aval, "shape") and jnp.issubdtype(aval.dtype, jnp.floating):
                    shapes.add(tuple(aval.shape))
            for sub in jax_core.jaxprs_in_params(eqn.params):
                walk(sub)

    walk(jaxpr.jaxpr)
    assert not [s for s in shapes if len(s) >= 2 and s[-2:] == (T, T)]
    # the blocks' scores are there: [.., block, keys up to its end]
    size = attention.query_blocks(T)[0][1]
    assert any(len(s) >= 2 and s[-2:] == (size, size) for s in shapes)
