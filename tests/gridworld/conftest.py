import math

import jax
import numpy as np
import pytest

from jaxtom.gridworld import env, reference
from jaxtom.gridworld.planner import logit_scale
from jaxtom.gridworld.simulation import reset_batch
from jaxtom.gridworld.types import EnvParams
from tests.tolerance import float32_tol


@pytest.fixture(scope="session")
def params():
    return EnvParams()


@pytest.fixture(scope="session")
def states(params):
    """A batch of 32 random episodes."""
    return reset_batch(jax.random.key(1234), params, 32)


def unbatch(tree, i):
    return jax.tree.map(lambda x: x[i], tree)


def random_walk(params, state, steps, seed, helper_random=True):
    """Step a JAX state and its reference copy side by side with the same actions: the human
    follows the reference policy, the helper acts uniformly at random. Yields both states."""
    rng = np.random.default_rng(seed)
    ref = reference.from_env_state(state)
    for _ in range(steps):
        human_action = reference.sample_action(rng, reference.human_policy(ref, ref.goal, params))
        helper_action = int(rng.integers(0, 7)) if helper_random else 0
        yield state, ref, human_action, helper_action
        state = env.transition(state, human_action, helper_action, params)
        ref = reference.step(ref, human_action, helper_action, params)


# --- float32 tolerances of the planners against the float64 reference (tests/tolerance.py) ---
# Rounding steps on a path of the human's float32 log-policy (planner.move_log_probs and the
# random_prob mixture), in EPS32 = 2u units of the move logits' scale S: a_k = scale gamma^m
# (gamma^k - 1) from log(gamma) rounded to float32, times m, exp and two constants (the exp's
# relative error 2u |m log gamma| is on a value ~ e^-|m log gamma|, so at most 2u/e of S): 4;
# the normaliser log(n0 + n1 e^a1 + n2 e^a2) passes a_k's errors on and adds exp, a sum of
# three and log: 5; the difference a_d - log: 1; the mixture (log1p, an add, logaddexp, whose
# slope is <= 1): 2. A probability exp(log p) adds u and moves by p |d log p| <= |d log p|.
HUMAN_POLICY_ROUNDING = 12


def move_logit_scale(params: EnvParams) -> float:
    """The largest |logit| of the human's moves: scale (1 - gamma^2) (planner.move_log_probs:
    the three logits are 0 > a1 > a2, a2 = scale gamma^m (gamma^2 - 1))."""
    return logit_scale(params, params.human_tau) * -math.expm1(2 * math.log(params.gamma))


def human_policy_tol(params: EnvParams) -> float:
    """Bound on float32 rounding in the human's log-probabilities, and so in its probabilities,
    against the float64 reference: HUMAN_POLICY_ROUNDING steps at the log-probabilities'
    magnitude, the move logits' scale plus the normaliser's log 4."""
    return float32_tol(move_logit_scale(params) + math.log(4), HUMAN_POLICY_ROUNDING)


def table_rounding_tol(params: EnvParams) -> float:
    """The likelihood table is built in float64 and stored in float32: one rounding (half an
    ulp, EPS32 / 2 relative) of values down to the floor log(likelihood_floor)."""
    return float32_tol(-math.log(params.likelihood_floor), 1)


def helper_policy_tol(params: EnvParams, num_goals: int) -> float:
    """Bound on float32 rounding in the helper's action probabilities (planner.helper_logits,
    then a softmax over the 7 actions) against the float64 reference. The logits are
    logit_scale(helper_tau) =: S times a probability-weighted mean of relative discounts
    gamma^m (gamma^k - 1) in [-1, 0], so |logits| <= S (190 by default). Steps in EPS32 units
    of S: each relative discount (log(gamma) rounded, times m and k, exp, expm1 and their
    product; exp's amplified error again <= 2u/e): 4; the weights rounded to float32 and the
    dot over `num_goals` hypotheses: 1 + num_goals; times S: 1; the softmax (the max
    subtraction, exp, the sum over 7 actions, the divide; a probability moves by at most half
    the largest logit error): 2."""
    return float32_tol(logit_scale(params, params.helper_tau), num_goals + 8)
