"""The household ELBO against a literal float64 reference (the public `compute_score_prr_v3`
formula written out with math.log), the Table 2 switches, and the penalty ordering."""

import math

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from jaxtom.household.goals import Goal
from jaxtom.mindzero.household.particles import format_particles, parse_particles
from jaxtom.mindzero.household.reward import (PUBLIC_FORMAT_PENALTY, elbo_reward, penalty,
                                              particle_rewards)
from jaxtom.mindzero.reward import RewardConfig

EPS = 1e-10


def reference(lik, prior, q, ok, prior_on=True, entropy_on=True, empty=None):
    """The public code, per sample: p = lik * prior (lik alone without a prior, 0 for an
    empty particle); sum q log max(p, 1e-10) - sum q log max(q, 1e-10); malformed -23.03."""
    out = []
    for b in range(len(q)):
        if not ok[b]:
            out.append(math.log(EPS))
            continue
        total = 0.0
        for i, qi in enumerate(q[b]):
            if qi <= 0:
                continue
            p = lik[b][i] * (prior[b][i] if prior_on else 1.0)
            if empty is not None and empty[b][i]:
                p = 0.0
            total += qi * math.log(max(p, EPS))
            if entropy_on:
                total -= qi * math.log(max(qi, EPS))
        out.append(total)
    return np.array(out)


def random_batch(seed, B=6, N=10):
    rng = np.random.default_rng(seed)
    lik = rng.uniform(0, 1, (B, N)) ** 3
    prior = rng.uniform(0, 1, (B, N))
    lik[0, :3] = 0.0  # zero likelihoods hit the floor
    prior[1, -1] = 1e-14
    q = rng.dirichlet(np.ones(N), B)
    q[2, 5:] = 0.0  # padding / fewer hypotheses
    q[2] /= q[2].sum()
    ok = np.ones(B, bool)
    ok[3] = False
    return lik, prior, q, ok


@pytest.mark.parametrize("prior_on, entropy_on", [(True, True), (False, True), (True, False),
                                                  (False, False)])
def test_elbo_matches_float64_reference(prior_on, entropy_on):
    lik, prior, q, ok = random_batch(0)
    with np.errstate(divide="ignore"):
        ll, lp = np.log(lik), np.log(prior)
    cfg = RewardConfig(prior_weight=float(prior_on), entropy_weight=float(entropy_on),
                       format_penalty=PUBLIC_FORMAT_PENALTY)
    got, terms = elbo_reward(ll, q, ok, lp, cfg=cfg)
    want = reference(lik, prior, q, ok, prior_on, entropy_on)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert got.dtype == np.float64
    assert terms["valid"].tolist() == ok.astype(float).tolist()
    # the no-prior switch also works by passing no prior at all
    if not prior_on:
        np.testing.assert_allclose(elbo_reward(ll, q, ok, None, cfg=cfg)[0], want, rtol=1e-12)


@np.errstate(divide="ignore")
def test_single_hypothesis_and_empty_particles():
    lik, prior, q, ok = random_batch(1, N=1)
    got, _ = elbo_reward(np.log(lik), q, ok, np.log(prior),
                         cfg=RewardConfig(format_penalty=PUBLIC_FORMAT_PENALTY))
    np.testing.assert_allclose(got, reference(lik, prior, q, ok), rtol=1e-12)
    lik, prior, q, ok = random_batch(2)
    empty = np.zeros_like(q, bool)
    empty[0, 1] = empty[4, :] = True
    got, _ = elbo_reward(np.log(lik), q, ok, np.log(prior), empty=empty,
                         cfg=RewardConfig(format_penalty=PUBLIC_FORMAT_PENALTY))
    np.testing.assert_allclose(got, reference(lik, prior, q, ok, empty=empty), rtol=1e-12)


def test_penalty_is_strictly_below_every_well_formed_reward():
    cfg = RewardConfig()
    assert penalty(cfg) == pytest.approx(math.log(1e-10) - 1) and penalty(cfg) < -23.03
    # the worst well-formed completion: one-hot q on a zero-likelihood goal
    q = np.zeros((1, 10))
    q[0, 0] = 1.0
    worst, _ = elbo_reward(np.full((1, 10), -np.inf), q, np.ones(1, bool),
                           np.full((1, 10), -np.inf))
    bad, _ = elbo_reward(np.zeros((1, 10)), q, np.zeros(1, bool))
    assert worst[0] == pytest.approx(math.log(1e-10)) and bad[0] < worst[0]
    # the public constant ties the worst case (why the default differs)
    public, _ = elbo_reward(np.zeros((1, 10)), q, np.zeros(1, bool),
                            cfg=RewardConfig(format_penalty=PUBLIC_FORMAT_PENALTY))
    assert public[0] == pytest.approx(worst[0])


@settings(max_examples=80, deadline=None)
@given(st.integers(0, 2**31), st.floats(0, 3), st.floats(0, 3))
def test_any_weights_keep_the_penalty_below(seed, wp, we):
    rng = np.random.default_rng(seed)
    ll = np.log(rng.uniform(0, 1, (4, 5))) * rng.uniform(0, 60)
    lp = np.log(rng.uniform(0, 1, (4, 5))) * rng.uniform(0, 60)
    q = rng.dirichlet(np.ones(5) * 0.2, 4)
    cfg = RewardConfig(prior_weight=wp, entropy_weight=we)
    r, _ = elbo_reward(ll, q, np.ones(4, bool), lp, cfg=cfg)
    assert np.all(np.isfinite(r)) and np.all(r > penalty(cfg))


def test_nan_and_inf_scores_are_defined():
    q = np.array([[0.5, 0.5]])
    r, terms = elbo_reward(np.array([[np.nan, np.inf]]), q, np.ones(1, bool),
                           np.array([[0.0, np.nan]]))
    # NaN -> p = 0 (floor); +inf likelihood -> log 1; NaN prior -> floor
    assert r[0] == pytest.approx(math.log(1e-10) + math.log(2))
    assert all(np.isfinite(v).all() for v in terms.values())


def test_bad_arguments():
    with pytest.raises(ValueError, match="floor"):
        RewardConfig(likelihood_floor=0.0)
    with pytest.raises(ValueError, match="prior_weight"):
        RewardConfig(prior_weight=-1.0)
    with pytest.raises(ValueError, match="format_penalty"):
        RewardConfig(format_penalty=float("-inf"))
    with pytest.raises(ValueError, match="log_lik must have shape"):
        elbo_reward(np.zeros((2, 3)), np.zeros((2, 4)), np.ones(2, bool))
    with pytest.raises(ValueError, match="ok must be"):
        elbo_reward(np.zeros((2, 3)), np.zeros((2, 3)), np.ones(3, bool))


def test_particle_rewards_batches_each_estimator_once():
    table = Goal.make("setup_table", {"plate": 2, "cutleryfork": 2}, "kitchentable")
    washer = Goal.make("put_dishwasher", {"apple": 1}, "dishwasher")
    good = parse_particles(format_particles([table, washer], [0.8, 0.2]), num_particles=2)
    bad = parse_particles("no json", num_particles=2)
    single = parse_particles(format_particles([washer], [1.0]), num_particles=1)
    calls = []

    def lik(samples, goals):
        calls.append(("lik", list(samples), list(goals)))
        return np.log([0.9 if g.target == "kitchentable" else 0.1 for g in goals])

    def prior(samples, goals):
        calls.append(("prior", list(samples), list(goals)))
        return np.log([0.8 if g.task_name == "setup_table" else 0.01 for g in goals])

    r, terms = particle_rewards([good, bad, single], lik, prior, max_particles=2)
    assert [c[0] for c in calls] == ["lik", "prior"]
    assert calls[0][1] == [0, 0, 2] and calls[0][2] == [table, washer, washer]
    want = reference([[0.9, 0.1], [1, 1], [0.1, 1]], [[0.8, 0.01], [1, 1], [0.01, 1]],
                     [[0.8, 0.2], [0, 0], [1.0, 0]], [True, False, True])
    want[1] = penalty(RewardConfig())
    np.testing.assert_allclose(r, want, rtol=1e-12)
    calls.clear()
    particle_rewards([good], lik, prior, max_particles=2, cfg=RewardConfig(prior_weight=0))
    assert [c[0] for c in calls] == ["lik"]  # the ablation does not query the prior
    with pytest.raises(ValueError, match="returned 1 scores for 2 goals"):
        particle_rewards([good], lambda s, g: np.zeros(1), None, max_particles=2)
    r, _ = particle_rewards([bad], lik, prior, max_particles=2)  # nothing to score
    assert r.tolist() == [penalty(RewardConfig())] and len(calls) == 1
