import jax
import numpy as np
import pytest

from jaxtom.gridworld import env, reference
from jaxtom.gridworld.simulation import reset_batch
from jaxtom.gridworld.types import EnvParams


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
