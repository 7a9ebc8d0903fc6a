"""The model-driven helper (jaxtom.mindzero.assist) runs the gridworld helper's rules: driven by
a stub model that always names the true goal, it queries only after the human's non-pause
actions (or every step with `refresh_on_pause`), helps, and follows the teleport switch."""

import json

import numpy as np
import pytest

from jaxtom.gridworld.text import object_label
from jaxtom.mindzero import assist as assist_lib
from jaxtom.mindzero.observation import get_observation


class PerfectModel:
    """Stands in for a model's queries: answers every query with the row's true goal (p 0.9)
    and its reverse (p 0.1), records which (row, step) was queried, and reads the live view
    as an observation would (the compact line, and the live state a picture shows, which
    must be the state at the asked step)."""

    def __init__(self, states, seeds):
        color, shape = np.asarray(states.obj_color), np.asarray(states.obj_shape)
        labels = [[object_label(c, k) for c, k in zip(cs, ks)] for cs, ks in zip(color, shape)]
        goals = np.asarray(states.goal)
        self.answers = []
        for _ in seeds:
            for lab, (a, b) in zip(labels, goals):
                obj = [dict(zip(("color", "shape"), lab[i].split())) for i in (a, b)]
                self.answers.append(json.dumps({"particles": [
                    {"object1": obj[0], "object2": obj[1], "p": 0.9},
                    {"object1": obj[1], "object2": obj[0], "p": 0.1}]}))
        self.queries = []

    def ask(self, view, rows, **kwargs):
        for r, t in rows:
            assert view.labels[r][0] in get_observation("compact")(view, r, t, 2)
            state = view.state(r, t)  # the live state a picture shows: the recorded one
            assert int(state.time) == t
            x, y = np.asarray(state.human_pos)
            assert y * 10 + x == view.human_cell[r, t]
        self.queries.extend(rows)
        return [self.answers[r] for r, _ in rows], np.ones(len(rows), int)


@pytest.fixture
def run(episodes, params):
    states = episodes.take(np.arange(4)).states
    seeds = (10, 20)

    def go(**changes):
        model = PerfectModel(states, seeds)
        out = assist_lib.assist(model, states, params.replace(random_prob=0.15, **changes),
                                seeds=seeds)
        return out, model.queries
    return go


def test_model_driven_helper_queries_after_moves_and_helps(run):
    out, queries = run()
    every, every_queries = run(refresh_on_pause=True)
    # With refresh_on_pause every live step from t = 1 on is a query.
    assert len(every_queries) == int((every["t_collab"] - 1).sum())
    assert len(queries) < int((out["t_collab"] - 1).sum()), "no query after a pause"
    assert out["speedup"].mean() > 0.0
    assert np.asarray(out["log"])[:, 2].all(), "the argmax particle is the true goal"


def test_model_driven_helper_follows_the_teleport_switch(run):
    off, _ = run()
    on, _ = run(teleport_after=3)
    assert not np.array_equal(off["t_collab"], on["t_collab"])
