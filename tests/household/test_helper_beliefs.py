from collections import Counter

import numpy as np
import pytest

from jaxtom.household.goals import Goal
from jaxtom.household.helper_beliefs import (
    Commitment, SMCBelief, SMCConfig, gnp_decide, normalise, random_goal, remaining,
    target_probs, type_probs,
)

G1 = Goal.make("setup_table", {"plate": 2, "cutleryfork": 2}, "kitchentable")
G2 = Goal.make("put_fridge", {"apple": 1, "salmon": 2}, "fridge")
G3 = Goal.make("setup_table", {"plate": 1, "wineglass": 1}, "coffeetable")


def test_remaining_removes_delivered_and_held():
    delivered = Counter({("plate", "kitchentable"): 1, ("plate", "coffeetable"): 5})
    assert remaining(G1, delivered, Counter({"cutleryfork": 1})) == {"plate": 1, "cutleryfork": 1}
    assert remaining(G1, delivered, Counter({"plate": 1})) == {"cutleryfork": 2}


def test_type_and_target_probs():
    parts = [(G1, 0.5), (G2, 0.3), (G3, 0.2)]
    probs = type_probs(parts, Counter(), Counter())
    assert probs["plate"] == pytest.approx(0.7)
    assert probs["salmon"] == pytest.approx(0.3)
    assert target_probs(parts) == pytest.approx({"kitchentable": 0.5, "fridge": 0.3,
                                                 "coffeetable": 0.2})
    assert target_probs(parts, "plate") == pytest.approx({"kitchentable": 0.5, "coffeetable": 0.2})


def test_gnp_thresholds():
    parts = [(G1, 0.5), (G2, 0.3), (G3, 0.2)]
    assert gnp_decide(parts, None, Counter(), Counter()) == Commitment("grab", "plate")
    # once plates are all delivered, no type reaches 0.7
    done = Counter({("plate", "kitchentable"): 2, ("plate", "coffeetable"): 1})
    assert gnp_decide(parts, None, done, Counter()) == Commitment()
    assert gnp_decide(parts, "plate", Counter(), Counter()) == Commitment("put", "kitchentable")
    assert gnp_decide([(G1, 0.4), (G3, 0.4), (G2, 0.2)], "plate", Counter(), Counter()) == \
        Commitment()
    assert gnp_decide([], None, Counter(), Counter()) == Commitment()


def test_random_goal_ranges():
    rng = np.random.default_rng(0)
    goals = [random_goal(rng) for _ in range(300)]
    assert {len(g.objects) for g in goals} == {1, 2, 3}
    counts = {c for g in goals for _, c in g.objects}
    assert min(counts) == 1 and max(counts) == 6


def test_smc_prunes_and_refills():
    lik = {G1: 0.9, G2: 0.0, G3: 0.1}
    smc = SMCBelief(SMCConfig(num_particles=3, keep_top=1, keep_min=0.05))
    smc.update([G1, G2, G3], lik.get)
    assert set(smc.weights) == {G1, G3}
    assert smc.weights[G1] == pytest.approx(0.9)
    # all-zero likelihood: every particle gets the same floor, none dropped by the rule
    smc2 = SMCBelief(SMCConfig(num_particles=2, keep_top=5))
    smc2.update([G1, G2], lambda g: 0.0)
    assert smc2.weights == pytest.approx({G1: 0.5, G2: 0.5})
    assert sum(p for _, p in smc.particles()) == pytest.approx(1.0)


def test_normalise_merges():
    assert normalise([(G1, 1.0), (G1, 1.0), (G2, 2.0)]) == [(G1, 0.5), (G2, 0.5)]
    assert normalise([(G1, 0.0)]) == []
