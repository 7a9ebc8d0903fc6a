"""Losses against the NumPy reference on random and degenerate inputs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxtom import rl
from tests.rl import reference as ref

CASES = range(12)


def random_inputs(seed, B=6, T=9):
    rng = np.random.default_rng(seed)
    logp = -rng.exponential(1.5, (B, T)).astype(np.float32)
    kind = seed % 4
    # large ratios both ways, tiny deltas (KL near 0), very negative advantages
    old = logp + rng.normal(0, [0.05, 3.0, 1e-5, 0.5][kind], (B, T)).astype(np.float32)
    refp = logp + rng.normal(0, [0.3, 5.0, 3e-5, 30.0][kind], (B, T)).astype(np.float32)
    adv = rng.normal(0, [1, 1, 1, 50][kind], B).astype(np.float32)
    mask = (rng.random((B, T)) < 0.6).astype(np.float32)
    if seed % 5 == 0:
        mask[:] = 0.0  # empty mask
    return logp, old, refp, adv, mask


@pytest.mark.parametrize("seed", CASES)
def test_grpo_loss_matches_reference(seed):
    logp, old, refp, adv, mask = random_inputs(seed)
    for kw in [{}, dict(clip_low=0.1, clip_high=0.28, dual_clip=2.0, kl_coef=0.5)]:
        got = float(rl.grpo_loss(logp, old, refp, adv, mask, **kw))
        want = ref.grpo_loss(logp, old, refp, adv, mask,
                             **{{"dual_clip": "c"}.get(k, k): v for k, v in kw.items()})
        assert np.isfinite(got)
        assert got == pytest.approx(want, rel=1e-5, abs=1e-6), (seed, kw)


def test_per_token_advantages_equal_per_sequence():
    logp, old, refp, adv, mask = random_inputs(1)
    a = rl.grpo_loss(logp, old, refp, adv, mask)
    b = rl.grpo_loss(logp, old, refp, np.repeat(adv[:, None], logp.shape[1], 1), mask)
    assert float(a) == pytest.approx(float(b), rel=1e-6)


def test_kl_uses_expm1_not_naive_form():
    logp = np.full((1, 4), -2.0, np.float32)
    refp = logp + np.float32(3e-5)
    kl = rl.k3_kl(jnp.asarray(logp), jnp.asarray(refp))
    assert float(kl[0, 0]) == pytest.approx(0.5 * float(refp[0, 0] - logp[0, 0]) ** 2, rel=1e-2)


def test_dual_clip_bounds_negative_advantage():
    logp = np.array([[0.0, 5.0]], np.float32)  # ratio e^5 at token 1
    old = np.zeros_like(logp)
    s, clipped, dual = rl.dual_clip_surrogate(logp, old, np.array([[-2.0]], np.float32))
    assert float(s[0, 1]) == pytest.approx(-6.0)  # max(rho A, c A) = c A = -6
    assert bool(dual[0, 1]) and not bool(dual[0, 0])
    s, clipped, _ = rl.dual_clip_surrogate(logp, old, np.array([[2.0]], np.float32))
    assert float(s[0, 1]) == pytest.approx(2.4) and bool(clipped[0, 1])


@pytest.mark.parametrize("seed", range(6))
def test_group_advantages_match_reference(seed):
    rng = np.random.default_rng(seed)
    G = [2, 3, 4, 8][seed % 4]
    r = rng.normal(size=G * 5).astype(np.float32)
    r[:G] = 0.7  # one all-equal group
    r[G:2 * G] = rng.integers(0, 2, G)  # binary rewards
    got = np.asarray(rl.group_advantages(r, G))
    want = ref.group_advantages(r, G)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    assert np.all(got[:G] == 0.0)
    np.testing.assert_allclose(got.reshape(-1, G).sum(1), 0.0, atol=1e-4)


def test_group_advantages_errors():
    with pytest.raises(ValueError, match="divide the number of rewards"):
        rl.group_advantages(np.zeros(7), 4)
    with pytest.raises(ValueError, match=r"1-D \[num_sequences\]"):
        rl.group_advantages(np.zeros((2, 4)), 4)


@pytest.mark.parametrize("seed", range(6))
def test_prediction_nll_matches_reference(seed):
    rng = np.random.default_rng(seed)
    logp = -rng.exponential(2.0, (5, 11)).astype(np.float32)
    mask = (rng.random((5, 11)) < [0.1, 0.5, 0.9, 0.3, 0.0, 0.6][seed]).astype(np.float32)
    mask[seed % 5] = 0.0  # a row without a target does not count
    got = float(rl.prediction_nll(logp, mask))
    assert got == pytest.approx(ref.prediction_nll(logp, mask), rel=1e-5, abs=1e-6)


def test_prediction_nll_is_mean_of_per_target_means():
    logp = np.array([[-1.0, -1.0, -1.0, -1.0], [-4.0, 0.0, 0.0, 0.0]], np.float32)
    mask = np.array([[1, 1, 1, 1], [1, 0, 0, 0]], np.float32)
    assert float(rl.prediction_nll(logp, mask)) == pytest.approx(2.5)  # not 8/5


@pytest.mark.parametrize("seed", range(3))
def test_decision_entropy_matches_reference(seed):
    rng = np.random.default_rng(seed)
    logits = rng.normal(0, [0.1, 3.0, 30.0][seed], (3, 6, 17)).astype(np.float32)
    mask = np.zeros((3, 6), np.float32)
    mask[0, 2] = mask[2, 5] = 1.0
    got = float(rl.decision_entropy(logits, mask))
    assert got == pytest.approx(ref.decision_entropy(logits, mask), rel=1e-4, abs=1e-6)
    assert float(rl.decision_entropy(logits, np.zeros_like(mask))) == 0.0


def test_token_logprobs_alignment():
    logits = jax.random.normal(jax.random.key(0), (2, 5, 7))
    tokens = jnp.array([[1, 2, 3, 4, 5], [6, 0, 1, 2, 3]])
    lp = rl.token_logprobs(logits, tokens)
    full = jax.nn.log_softmax(logits, -1)
    assert float(lp[0, 0]) == 0.0
    assert float(lp[1, 3]) == pytest.approx(float(full[1, 2, 2]))


def test_gradients_finite_on_degenerate_inputs():
    rng = np.random.default_rng(3)
    for _ in range(20):
        B, T = 4, 6
        logp = jnp.asarray(rng.normal(0, 50, (B, T)), jnp.float32)
        old = jnp.asarray(rng.normal(0, 50, (B, T)), jnp.float32)
        refp = jnp.asarray(rng.normal(0, 50, (B, T)), jnp.float32)
        adv = jnp.asarray(rng.choice([0.0, -1e4, 1e4, 1e-8], B), jnp.float32)
        mask = jnp.asarray(rng.random((B, T)) < rng.random(), jnp.float32)
        val, g = jax.value_and_grad(rl.grpo_loss)(logp, old, refp, adv, mask)
        assert np.isfinite(float(val)) and np.all(np.isfinite(np.asarray(g)))
        tmask = jnp.asarray(rng.random((B, T)) < rng.random(), jnp.float32)
        val, g = jax.value_and_grad(rl.prediction_nll)(logp, tmask)
        assert np.isfinite(float(val)) and np.all(np.isfinite(np.asarray(g)))
