"""Mixed precision keeps small updates.

One GRPO update at the MindZero paper's settings (lr 1e-6, AdamW b=(0.9, 0.999) wd 1e-2,
global-norm clip 1.0, KL coef 1e-2 against a frozen copy) on a tiny random Qwen3:
float32 master weights with bfloat16 compute change ~98% of the weights, as pure float32
does; bfloat16 weights change ~1.9% (measured: 0.0185), because an update of ~1e-6 is below
half a bf16 spacing at typical |w| ~ 1e-2 and rounds away. With `compensated_updates` the
bf16 weights plus their Kahan compensation carry the update.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import nnx

from jaxtom import rl
from jaxtom.models import init_decoder
from jaxtom.rl.gradients import compensated_add
from tests.rl.common import TINY, params_array, random_batch
from tests.tolerance import decoder_depth, decoder_reduction, float32_tol

MINDZERO = rl.StepConfig(learning_rate=1e-6, weight_decay=1e-2, max_grad_norm=1.0,
                         kl_coef=1e-2, reference="frozen_copy")
MODES = {"fp32": ("float32", "float32", False), "mixed": ("float32", "bfloat16", False),
         "bf16": ("bfloat16", "bfloat16", False), "kahan": ("bfloat16", "bfloat16", True)}


def flat(tree):
    return np.concatenate([np.asarray(x, np.float64).ravel() for x in jax.tree.leaves(tree)])


@pytest.fixture(scope="module")
def runs():
    """Per mode: (learner, params before, state after one update, log-probs before)."""
    batch = random_batch(0, prediction=False, decision=False, off_policy=False)
    out = {}
    for name, (param_dtype, compute_dtype, kahan) in MODES.items():
        model = init_decoder(TINY.replace(param_dtype=param_dtype,
                                          compute_dtype=compute_dtype), seed=0)
        learner = rl.Learner(model, dataclasses.replace(MINDZERO, compensated_updates=kahan), total_steps=1000)
        state = learner.init_state(model)
        before, logp = params_array(state), np.asarray(learner.logprobs(state, batch))
        state, metrics = learner.update(state, batch)
        assert float(metrics["skipped"]) == 0.0
        out[name] = (learner, before, state, logp)
    return out


def changed(run):
    learner, before, state, _ = run
    after = params_array(state)
    if learner.cfg.compensated_updates:  # the weights are params + compensation
        after = after + flat(state.opt_state[1])
    return after != before


def test_fp32_master_weights_with_bf16_compute_keep_a_1e6_update(runs):
    fp32, mixed = changed(runs["fp32"]).mean(), changed(runs["mixed"]).mean()
    assert fp32 > 0.5 and mixed > 0.5, (fp32, mixed)
    assert abs(fp32 - mixed) < 0.02
    _, _, state, logp_mixed = runs["mixed"]
    # master weights and both Adam moments stay float32
    assert {x.dtype for x in jax.tree.leaves(state.params)} == {jnp.dtype("float32")}
    assert {x.dtype for x in jax.tree.leaves(state.opt_state)
            if x.ndim} == {jnp.dtype("float32")}
    # ...while the forward really runs in bf16: log-probs (float32) differ from float32
    # compute by more than float32 rounding could (the bound of tests/tolerance.py for the
    # forward and the log-softmax), and by less than bf16's
    logp_fp32 = runs["fp32"][3]
    assert logp_mixed.dtype == np.float32
    diff = np.abs(logp_mixed - logp_fp32).max()
    fp32_bound = float32_tol(np.abs(logp_fp32).max(), decoder_reduction(TINY, 16)
                             + TINY.vocab_size, decoder_depth(TINY))
    assert fp32_bound < diff < 64 * 2.0 ** -8 * 4, (fp32_bound, diff)
    # the mixed update moves each weight the way the float32 one does
    d32 = params_array(runs["fp32"][2]) - runs["fp32"][1]
    dmx = params_array(state) - runs["mixed"][1]
    moved = (d32 != 0) & (dmx != 0)
    assert np.mean(np.sign(d32[moved]) == np.sign(dmx[moved])) > 0.9


def test_bf16_weights_lose_most_of_a_1e6_update(runs):
    frac = changed(runs["bf16"]).mean()
    assert frac < 0.5, frac  # measured 0.0185
    _, _, state, _ = runs["bf16"]
    assert {x.dtype for x in jax.tree.leaves(state.params)} == {jnp.dtype("bfloat16")}


def test_compensated_bf16_weights_keep_a_1e6_update(runs):
    _, before, state, _ = runs["kahan"]
    assert changed(runs["kahan"]).mean() > 0.5
    assert {x.dtype for x in jax.tree.leaves(state.params)} == {jnp.dtype("bfloat16")}
    # the carried update is the float32-master one's, up to bf16-compute gradient noise
    d32 = params_array(runs["mixed"][2]) - runs["mixed"][1]
    dk = params_array(state) + flat(state.opt_state[1]) - before
    moved = (d32 != 0) & (dk != 0)
    assert np.mean(np.sign(d32[moved]) == np.sign(dk[moved])) > 0.9


def test_compensated_add_accumulates_small_steps():
    p0 = (0.02 * jax.random.normal(jax.random.key(0), (4096,))).astype(jnp.bfloat16)
    step, n = jnp.float32(1e-6), 100
    plain, kahan, comp = p0, p0, jnp.zeros_like(p0)
    add = jax.jit(lambda p, c: compensated_add(p, c, jnp.full(p.shape, step)))
    for _ in range(n):
        plain = (plain.astype(jnp.float32) + step).astype(jnp.bfloat16)
        kahan, comp = add(kahan, comp)
    x0 = np.asarray(p0, np.float64)
    assert np.mean(np.asarray(plain, np.float64) == x0) > 0.9  # every step rounded away
    total = np.asarray(kahan, np.float64) + np.asarray(comp, np.float64)
    # each stored compensation is rounded to bf16: |c| <= half a spacing of p, so the error
    # per step is <= 2^-9 * 2^-8 |p|
    np.testing.assert_allclose(total, x0 + n * 1e-6, rtol=0, atol=float(
        n * 2.0 ** -17 * np.abs(x0).max() + 1e-9))
    assert np.mean(np.asarray(kahan, np.float64) != x0) > 0.5  # the weights themselves moved


def test_rollouts_sample_from_compute_dtype_weights(runs):
    """Mixed precision: the sampler reads a bfloat16 copy of the float32 master weights
    (`Learner.sampling_model`); its logits agree with the master model's to bfloat16
    rounding, the master weights stay float32, and a float32 run samples its own weights."""
    learner, _, state, _ = runs["mixed"]
    sampler = learner.sampling_model(state)
    dtypes = {x.dtype for x in jax.tree.leaves(nnx.state(sampler, nnx.Param))}
    assert dtypes == {jnp.dtype(jnp.bfloat16)}
    assert {x.dtype for x in jax.tree.leaves(state.params)} == {jnp.dtype(jnp.float32)}
    tokens = jnp.asarray(np.random.default_rng(0).integers(1, TINY.vocab_size, (2, 16)))
    master, copy = learner.model(state)(tokens), sampler(tokens)
    scale = float(jnp.max(jnp.abs(master)))
    # bf16 compute either way; only the weights' rounding point differs (2^-8 relative)
    assert float(jnp.max(jnp.abs(master - copy))) <= 2.0 ** -8 * scale * decoder_depth(TINY)
    fp32_learner, _, fp32_state, _ = runs["fp32"]
    same = fp32_learner.sampling_model(fp32_state)
    assert all(a is b for a, b in zip(jax.tree.leaves(nnx.state(same, nnx.Param)),
                                      jax.tree.leaves(nnx.state(
                                          fp32_learner.model(fp32_state), nnx.Param))))
