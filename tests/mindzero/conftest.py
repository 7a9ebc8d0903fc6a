import jax
import pytest

from jaxtom.gridworld import EnvParams, generate_episodes


@pytest.fixture(scope="session")
def params():
    return EnvParams(max_steps=50)


@pytest.fixture(scope="session")
def episodes(params):
    """16 filtered episodes shared by the mindzero tests (one compile)."""
    return generate_episodes(jax.random.key(0), params, 16, batch_size=256)
