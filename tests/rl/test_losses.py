"""Losses against the NumPy reference on random and degenerate inputs."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxtom import rl
from jaxtom.rl.losses import KL_CLAMP, LOG_RATIO_CLAMP
from tests.rl import reference as ref
from tests.rl.common import LOSS_OPS
from tests.tolerance import assert_close, is_close


def grpo_tol(adv, mask, clip_high=0.2, dual_clip=3.0, kl_coef=0.01):
    """The float32 bound (tests/tolerance.py) on a GRPO token mean: each term is at most
    S = |A| max(1 + clip_high, c) + kl_coef KL_CLAMP whichever branch the clips take; the
    mean rounds over its mask.size terms, each term over LOSS_OPS ops, and exp turns the
    rounding of a log-ratio (|x| <= LOG_RATIO_CLAMP) into a relative error of that size."""
    scale = np.abs(adv).max() * max(1 + clip_high, dual_clip) + kl_coef * KL_CLAMP
    return dict(reduction=np.size(mask) + LOSS_OPS + int(LOG_RATIO_CLAMP), scale=scale)

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
        assert_close(got, want, **grpo_tol(adv, mask, **{k: v for k, v in kw.items()
                                                          if k != "clip_low"}),
                     err_msg=f"{seed} {kw}")


def test_per_token_advantages_equal_per_sequence():
    logp, old, refp, adv, mask = random_inputs(1)
    a = rl.grpo_loss(logp, old, refp, adv, mask)
    b = rl.grpo_loss(logp, old, refp, np.repeat(adv[:, None], logp.shape[1], 1), mask)
    assert_close(b, a, **grpo_tol(adv, mask))


def test_kl_uses_expm1_not_naive_form():
    logp = np.full((1, 4), -2.0, np.float32)
    refp = logp + np.float32(3e-5)
    kl = rl.k3_kl(jnp.asarray(logp), jnp.asarray(refp))
    # float32 rounds expm1(d) ~ d and d themselves: an error of a few eps x |d| (2.4% of
    # d^2 / 2 here); the naive exp(d) - 1 - d rounds exp(d) ~ 1 instead, 1e4 times worse
    d = float(refp[0, 0] - logp[0, 0])
    close = dict(reduction=4, scale=abs(d))
    assert_close(kl[0, 0], 0.5 * d ** 2, **close)
    delta = jnp.float32(d)
    assert not is_close(jnp.exp(delta) - 1 - delta, 0.5 * d ** 2, **close)


def test_dual_clip_bounds_negative_advantage():
    logp = np.array([[0.0, 5.0]], np.float32)  # ratio e^5 at token 1
    old = np.zeros_like(logp)
    s, clipped, dual = rl.dual_clip_surrogate(logp, old, np.array([[-2.0]], np.float32))
    assert float(s[0, 1]) == pytest.approx(-6.0)  # max(rho A, c A) = c A = -6
    assert bool(dual[0, 1]) and not bool(dual[0, 0])
    s, clipped, _ = rl.dual_clip_surrogate(logp, old, np.array([[2.0]], np.float32))
    assert float(s[0, 1]) == pytest.approx(2.4) and bool(clipped[0, 1])


@pytest.mark.parametrize("scale", ["batch", "none"])
def test_batch_and_unscaled_advantages_match_reference_and_keep_small_groups_small(scale):
    """Unlike per-group GRPO, a group whose rewards barely differ keeps a small advantage."""
    rng = np.random.default_rng(3)
    G = 4
    r = rng.normal(size=G * 6).astype(np.float32) * 10
    r[:G] = 0.7  # all equal
    r[G:2 * G] = np.float32([0.0, 0.01, 0.0, 0.01])  # a near-tie
    got = np.asarray(rl.group_advantages(r, G, scale=scale))
    want = ref.group_advantages(r, G, scale=scale)
    centred = r.astype(np.float64).reshape(-1, G)
    centred -= centred.mean(1, keepdims=True)
    scale_ = np.abs(r).max() / max(np.sqrt((centred ** 2).sum() / (6 * (G - 1))), 1e-3) \
        + np.abs(want).max()
    assert_close(got, want, reduction=6 * G + 8, scale=scale_)
    assert np.all(got[:G] == 0.0)
    assert np.abs(got[G:2 * G]).max() < 0.01 < np.abs(rl.group_advantages(r, G))[G:2 * G].min()
    with pytest.raises(ValueError, match="advantage scale"):
        rl.group_advantages(r, G, scale="global")


def test_std_floor_keeps_near_ties_small_and_leaves_wide_groups_as_grpo():
    G = 4
    wide = np.float32([0.0, 3.0, -2.0, 7.0])
    tie = np.float32([0.0, 0.1, 0.0, 0.1])
    r = np.concatenate([wide, tie])
    got = np.asarray(rl.group_advantages(r, G, std_floor=1.0))
    plain = np.asarray(rl.group_advantages(r, G))
    np.testing.assert_array_equal(got[:G], plain[:G])  # std 3.9 > floor: GRPO as is
    want = (tie - tie.mean()) / (1.0 + 1e-6)  # std 0.058 < floor: divided by the floor
    assert_close(got[G:], want, reduction=2 * G + 8, scale=1.0)
    with pytest.raises(ValueError, match="std_floor"):
        rl.group_advantages(r, G, scale="batch", std_floor=1.0)


@pytest.mark.parametrize("seed", range(6))
def test_group_advantages_match_reference(seed):
    rng = np.random.default_rng(seed)
    G = [2, 3, 4, 8][seed % 4]
    r = rng.normal(size=G * 5).astype(np.float32)
    r[:G] = 0.7  # one all-equal group
    r[G:2 * G] = rng.integers(0, 2, G)  # binary rewards
    got = np.asarray(rl.group_advantages(r, G))
    want = ref.group_advantages(r, G)
    # float32 mean and std over G, then (r - mean) / std: rounding of |r| size, divided by
    # the smallest std of a group that is not all equal
    std = r.astype(np.float64).reshape(-1, G).std(1, ddof=1)
    scale = np.abs(r).max() / std[std > 0].min() + np.abs(want).max()
    assert_close(got, want, reduction=2 * G + 8, scale=scale)
    assert np.all(got[:G] == 0.0)  # exact by construction
    assert_close(got.reshape(-1, G).sum(1), np.zeros(len(r) // G), reduction=3 * G + 8,
                 scale=scale)


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
    # a row's sum (T terms) and mean, then the mean over B rows, of terms up to max |logp|
    assert_close(got, ref.prediction_nll(logp, mask), reduction=logp.shape[1] + logp.shape[0]
                 + 4, scale=np.abs(logp).max())


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
    # log-softmax over V: log p = z - logsumexp(z) rounds at the logits' size, so the
    # entropy -sum p log p errs by eps x V x max |z| (not relative to a peaked, small H)
    V = logits.shape[-1]
    want = ref.decision_entropy(logits, mask)
    assert_close(got, want, reduction=2 * V + 8, scale=np.abs(logits).max() + abs(want))
    assert float(rl.decision_entropy(logits, np.zeros_like(mask))) == 0.0


def test_token_logprobs_alignment():
    logits = jax.random.normal(jax.random.key(0), (2, 5, 7))
    tokens = jnp.array([[1, 2, 3, 4, 5], [6, 0, 1, 2, 3]])
    lp = rl.token_logprobs(logits, tokens)
    full = jax.nn.log_softmax(logits, -1)
    assert float(lp[0, 0]) == 0.0
    assert_close(lp[1, 3], full[1, 2, 2], reduction=2 * 7 + 4,
                 scale=float(jnp.abs(logits[1, 2]).max() + jnp.abs(full[1, 2, 2])))
    assert not is_close(lp[1, 3], full[1, 3, 2], reduction=2 * 7 + 4,  # one position late
                        scale=float(jnp.abs(logits[1, 2]).max() + jnp.abs(full[1, 2, 2])))


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


def test_group_advantages_take_ragged_groups_by_id():
    """Groups named by id (any order, any sizes; CToM's once failed conversations drop
    out): each is normalised on its own members, a lone member gets 0, and equal-size
    consecutive ids give bit for bit what group_size gives."""
    rng = np.random.default_rng(3)
    r = rng.normal(size=9).astype(np.float32)
    ids = np.array([2, 0, 2, 0, 5, 2, 0, 0, 7])  # sizes 3, 4, 1, 1
    for scale in ("group", "batch", "none"):
        got = np.asarray(rl.group_advantages(r, scale=scale, groups=ids))
        centred = {g: r[ids == g] - r[ids == g].mean() for g in (0, 2)}
        pooled = np.sqrt(sum((c ** 2).sum() for c in centred.values()) / (3 + 2))
        for g, c in centred.items():
            den = {"group": r[ids == g].std(ddof=1), "batch": pooled, "none": 1.0}[scale]
            np.testing.assert_allclose(got[ids == g], c / den, rtol=1e-5, atol=1e-6)
        assert got[4] == got[8] == 0.0
    even = rng.normal(size=12).astype(np.float32)
    for scale, floor in (("group", 0.0), ("group", 0.5), ("batch", 0.0), ("none", 0.0)):
        a = np.asarray(rl.group_advantages(even, 4, scale=scale, std_floor=floor))
        b = np.asarray(rl.group_advantages(even, scale=scale, std_floor=floor,
                                           groups=np.arange(12) // 4))
        assert np.array_equal(a, b)
    with pytest.raises(ValueError, match="exactly one of group_size"):
        rl.group_advantages(even, 4, groups=np.arange(12) // 4)
    with pytest.raises(ValueError, match="one id per reward"):
        rl.group_advantages(even, groups=[0, 1])
