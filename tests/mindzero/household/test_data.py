"""Household training data: label-free timesteps, observations, teachers, goal space."""
import numpy as np
import pytest

from jaxtom.household import catalog
from jaxtom.mindzero.household import data as hd
from jaxtom.household.apartments import TEST_APARTMENTS, TRAIN_APARTMENTS, apartments
from jaxtom.household.episodes import generate_episodes
from jaxtom.mindzero.household.particles import parse_particles


@pytest.fixture(scope="module")
def episodes():
    return generate_episodes(apartments(TRAIN_APARTMENTS), 8, seed=3)


def test_records_start_after_the_first_key_action_and_cover_every_step(episodes):
    records = hd.timestep_records(episodes)
    for e, ep in enumerate(episodes):
        ts = [t for r, t in records if r == e]
        assert ts == list(range(ep.key_steps[0] + 1, ep.length + 1))
        assert ep.actions[ts[0] - 1].is_key  # the first prompt's latest action is a key one
    assert len(hd.timestep_records(episodes, after_first_key=False)) > len(records)
    assert len(hd.timestep_records(episodes, stride=3)) < len(records)


def test_records_and_prompts_carry_no_goal(episodes):
    ds = hd.timestep_dataset(episodes, batch_size=4, seed=0, epochs=1)
    batch = ds[0]
    assert set(batch) == {"episode", "t", "prompt"}
    for e, t, prompt in zip(batch["episode"], batch["t"], batch["prompt"]):
        assert prompt == hd.compact_observation(episodes[int(e)], int(t), 3)
    # the compact line is a function of observed actions and states: two episodes that agree
    # on them but differ in the goal would render the same (checked here on its parts)
    ep = episodes[0]
    line = hd.compact_observation(ep, ep.length, 3)
    assert line.startswith("n=3 | has ") and "| last put " in line
    assert ep.goal.task_name not in line


def test_figure9_prompt_has_the_papers_parts(episodes):
    ep = episodes[1]
    t = ep.key_steps[0] + 1
    prompt = hd.figure_observation(ep, t, 10)
    for part in ("[current state]", "[key action history]", "[human's next action]",
                 "Hints:", "n=10 hypotheses", '"GoalParticle"', "minified JSON"):
        assert part in prompt
    with pytest.raises(ValueError, match="timestep"):
        hd.figure_observation(ep, 0, 10)


@pytest.mark.parametrize("teacher", hd.TEACHERS)
def test_teacher_targets_parse_with_n_distinct_goals_and_never_read_the_goal(episodes, teacher,
                                                                            monkeypatch):
    rng = np.random.default_rng(0)
    for e, t in hd.timestep_records(episodes, stride=7):
        text = hd.warmup_target(episodes[e], t, 3, rng, teacher)
        parsed = parse_particles(text, mode="train", num_particles=3)
        assert parsed.ok, (text, parsed)
        assert abs(sum(parsed.probs) - 1) < 1e-6
    # the teacher must not read the label: hide it and the targets stay the same
    ep = episodes[2]
    t = ep.length // 2 + 1
    a = hd.warmup_target(ep, t, 3, np.random.default_rng(5), teacher)
    monkeypatch.setattr(type(ep), "goal", property(lambda self: (_ for _ in ()).throw(
        AssertionError("the teacher read the goal"))))
    assert hd.warmup_target(ep, t, 3, np.random.default_rng(5), teacher) == a


def test_approached_teacher_writes_evidence_consistent_alternatives_with_mass(episodes):
    """The observed goal first, then every count +1 (the fixed order a from-scratch model can
    learn without repeating its first hypothesis), and no hypothesis at p = 0."""
    rng = np.random.default_rng(1)
    for e, t in hd.timestep_records(episodes, stride=5):
        parsed = parse_particles(hd.warmup_target(episodes[e], t, 3, rng), mode="train",
                                 num_particles=3)
        first, second = parsed.goals[:2]
        assert dict(second.objects) == {k: c + 1 for k, c in first.objects}
        assert (second.task_name, second.target) == (first.task_name, first.target)
        assert min(parsed.probs) >= 0.1 - 1e-9
    with pytest.raises(ValueError, match="cannot each get"):
        hd.teacher_probs(11, rng)


def test_observed_goal_counts_grabbed_objects_and_their_target(episodes):
    ep = episodes[0]
    ev = hd.evidence(ep, ep.length)  # the end: everything delivered
    g = hd.observed_goal(ev, np.random.default_rng(0))
    assert g.target == ep.goal.target
    assert dict(g.objects) == dict(ep.goal.objects)


def test_goal_support_holds_every_generated_goal():
    for apts in (TRAIN_APARTMENTS, TEST_APARTMENTS):
        for ep in generate_episodes(apartments(apts), 8, seed=11):
            support = hd.goal_support(ep.apartment)
            assert ep.goal in support and len(set(support)) == len(support)
            lp = hd.support_log_prior(support)
            assert np.isclose(np.exp(lp).sum(), 1.0)
    assert all(g.task_name in catalog.MINDZERO_TASKS for g in support)


def test_unknown_names_are_clear_errors(episodes):
    with pytest.raises(ValueError, match="unknown household observation"):
        hd.get_observation("image")
    with pytest.raises(ValueError, match="unknown warm-up teacher"):
        hd.teacher_goals(episodes[0], 5, 3, np.random.default_rng(0), "oracle")
