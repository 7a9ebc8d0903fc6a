"""The household QA answer reward against its formula (the public `rewards/hh_tom.py`)."""

import math

import numpy as np
import pytest

from jaxtom.mindzero.household.qa_reward import qa_reward


def test_qa_reward():
    ll = np.log([0.5, 1e-12, 0.2, np.nan])
    r = qa_reward(ll, np.array([0, 1, -1, 0]))
    assert r[0] == pytest.approx(math.log(0.5))
    assert r[1] == pytest.approx(math.log(1e-7))  # floored
    assert r[2] == pytest.approx(math.log(1e-7) - 1) and r[2] < r[1]  # unparseable: below all
    assert r[3] == pytest.approx(math.log(1e-7))
    with pytest.raises(ValueError, match="differ"):
        qa_reward(np.zeros(2), np.zeros(3))
