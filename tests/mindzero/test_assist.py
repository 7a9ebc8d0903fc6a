"""The model-driven helper (jaxtom.mindzero.assist) runs the gridworld helper's rules: driven by
a stub model that always names the true goal, it queries only after the human's non-pause
actions (or every step with `refresh_on_pause`), helps, and follows the teleport switch."""

import json

import numpy as np
import pytest

from jaxtom.gridworld.text import object_label
from jaxtom.mindzero import assist as assist_lib


class PerfectModel:
    """Stands in for the sampler: answers every query with the row's true goal (p 0.9) and its
    reverse (p 0.1), and records which (row, step) was queried."""

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

    def render(self, view, row, t, num_particles):
        return row, t

    def prompt_ids(self, prompt):
        return prompt

    def sample(self, model, codec, prompts, **kwargs):
        self.queries.extend(prompts)
        return [self.answers[r] for r, _ in prompts], None, np.ones(len(prompts), int)


@pytest.fixture
def run(monkeypatch, episodes, params):
    states = episodes.take(np.arange(4)).states
    seeds = (10, 20)

    def go(**changes):
        model = PerfectModel(states, seeds)
        monkeypatch.setattr(assist_lib, "get_observation", lambda name: model.render)
        monkeypatch.setattr(assist_lib, "sample_completions", model.sample)
        out = assist_lib.assist(None, model, states, params.replace(random_prob=0.15, **changes),
                                seeds=seeds, observation="compact")
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
