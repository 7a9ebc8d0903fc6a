import jax
import numpy as np
import pytest

from jaxtom.gridworld import episodes as episodes_lib
from jaxtom.gridworld.inference import goal_posterior
from jaxtom.gridworld.qa import accuracy, qa_episodes
from jaxtom.gridworld.types import COLORS, HELD_OUT_COLORS, HELD_OUT_SHAPES, SHAPES, EnvParams, goal_index


@pytest.fixture(scope="module")
def split():
    return episodes_lib.train_test_episodes(jax.random.key(0), EnvParams(), num_train=48,
                                            num_test=32, batch_size=256)


def test_filters_hold(split):
    rules = episodes_lib.EpisodeFilter()
    for eps in split:
        assert (eps.pick_step >= rules.min_pick_step).all()
        assert (eps.put_step - eps.pick_step >= rules.min_carry_steps).all()
        assert (eps.length == eps.put_step).all(), "the put completes the task"
        traj = eps.trajectories
        assert (np.asarray(traj.valid).sum(1) == eps.length).all()


def test_held_out_labels_and_layouts(split):
    train, test = split
    held_colors = {COLORS.index(c) for c in HELD_OUT_COLORS}
    held_shapes = {SHAPES.index(s) for s in HELD_OUT_SHAPES}
    assert not set(np.asarray(train.states.obj_color).ravel()) & held_colors
    assert not set(np.asarray(train.states.obj_shape).ravel()) & held_shapes
    assert set(np.asarray(test.states.obj_shape).ravel()) <= held_shapes
    assert not episodes_lib.layout_keys(train) & episodes_lib.layout_keys(test)


def test_true_goal_posterior_rises_with_progress_and_ends_confident(split):
    params = EnvParams()
    _, test = split
    post = np.asarray(goal_posterior(test.trajectories, params))
    goals = np.asarray(test.states.goal)
    true = goal_index(goals[:, 0], goals[:, 1])
    rows = np.arange(len(test))
    by_progress = []
    for fraction in (0.1, 0.4, 0.7, 1.0):
        step = np.maximum(np.ceil(fraction * test.length).astype(int), 1) - 1
        by_progress.append(post[rows, step, true].mean())
    assert all(a < b for a, b in zip(by_progress, by_progress[1:])), by_progress
    last = post[rows, test.length - 1]
    assert (last.argmax(-1) == true).mean() >= 0.9


def test_questions_are_well_formed():
    params = EnvParams()
    episodes, questions = qa_episodes(jax.random.key(3), params, 12, batch_size=256)
    assert len(episodes) == 12 and len(questions) == 36
    assert [q.kind for q in questions] == [1, 2, 3] * 12
    assert [q.episode for q in questions] == [i for i in range(12) for _ in range(3)]
    goals = np.asarray(episodes.states.goal)
    for q in questions:
        o1, o2 = goals[q.episode]
        truth = o1 if q.kind == 1 else o2
        assert q.options[q.answer] == truth and q.given == (o2 if q.kind == 1 else o1)
        assert len(set(q.options)) == 2 and q.given not in q.options
        if q.kind == 3:
            assert episodes.pick_step[q.episode] < q.step < episodes.put_step[q.episode]
        else:
            assert episodes.pick_step[q.episode] // 2 < q.step < episodes.pick_step[q.episode]
    answers = [q.answer_letter for q in questions]
    assert accuracy(questions, answers)[0] == 1.0
    assert accuracy(questions, ["z"] * len(questions))[0] == 0.0
    assert {q.answer_letter for q in questions} == {"a", "b"}, "answers are shuffled"


def test_taking_no_episodes_gives_an_empty_set(split):
    """A QA round that yields no usable episode takes an empty list (it used to raise)."""
    empty = split[0].take([])
    assert len(empty) == 0 and empty.trajectories.valid.shape[0] == 0
