import math

import numpy as np
import pytest

from jaxtom.household import catalog
from jaxtom.household.apartments import (
    TEST_APARTMENTS, TRAIN_APARTMENTS, apartment, apartments,
)
from jaxtom.household.episodes import MAX_STEPS, episode_plan, generate_episodes, run_human
from jaxtom.household.goals import Goal
from jaxtom.household.human import (
    HumanParams, action_distribution, initial_belief, planner_distribution,
    update_belief,
)
from jaxtom.household.tasks import available_tasks, generate_task, task_state
from jaxtom.household.world import WAIT, legal_actions, observe

ALL_TASKS = catalog.MINDZERO_TASKS + ("watch_tv",)


@pytest.fixture(scope="module")
def episodes():
    return generate_episodes(apartments(), 16, seed=3)


@pytest.mark.parametrize("split", [TRAIN_APARTMENTS, TEST_APARTMENTS])
@pytest.mark.parametrize("full", [False, True])
def test_human_alone_completes_every_task_within_budget(split, full):
    params = HumanParams(full_observation=full)
    for apt in apartments(split):
        for name in available_tasks(apt, ALL_TASKS):
            for seed in range(4):
                episode = run_human(generate_task(apt, name, 100 + seed), params, seed)
                assert episode.done, (apt.name, episode.goal.render())
                assert episode.length <= MAX_STEPS


@pytest.mark.slow
def test_human_completes_many_seeds():
    for full in (False, True):
        params = HumanParams(full_observation=full)
        for apt in apartments():
            for name in available_tasks(apt, ALL_TASKS):
                for seed in range(60):
                    assert run_human(generate_task(apt, name, seed), params, seed).done


def test_action_distribution_is_normalised_and_legal(episodes):
    for episode in episodes[:6]:
        for t in range(0, episode.length, 5):
            state, belief = episode.states[t], episode.beliefs[t]
            dist = action_distribution(state, belief, episode.goal, episode.params)
            assert math.isclose(sum(dist.values()), 1.0, abs_tol=1e-12)
            assert set(dist) == set(legal_actions(state, 0)) and min(dist.values()) > 0
            assert episode.actions[t] in dist


def test_done_human_waits():
    task = generate_task(apartment(1), "put_fridge", 0)
    state = task_state(task)
    trivial = Goal.make("put_fridge", {"apple": 1}, "fridge")
    fridge = state.apartment.furniture_of_type("fridge")[0]
    state = state.__class__(state.apartment, ("apple",), (fridge,), frozenset(), state.agents)
    belief = initial_belief(state, 0, full=True)
    assert planner_distribution(state, belief, trivial, HumanParams()) == {WAIT: 1.0}


def test_one_object_at_a_time_without_noise():
    params = HumanParams(epsilon=0.0)
    for seed in range(4):
        task = generate_task(apartment(3), "setup_table", seed)
        episode = run_human(task, params, seed)
        assert episode.done
        assert all(len(s.agents[0].holding) <= 1 for s in episode.states)


def test_same_seed_same_episode_and_seeds_differ():
    a = generate_episodes(apartments([0, 3]), 4, seed=11)
    b = generate_episodes(apartments([0, 3]), 4, seed=11)
    assert [e.actions for e in a] == [e.actions for e in b]
    assert [e.states for e in a] == [e.states for e in b]
    task = generate_task(apartment(3), "put_fridge", 1)
    runs = {run_human(task, HumanParams(), seed).actions for seed in range(5)}
    assert len(runs) > 1, "stochastic human: trajectories differ across seeds"


def test_episode_plan_cycles_tasks_and_skips_impossible():
    plan = episode_plan(apartments([0, 5]), 8)
    assert all(name != "put_dishwasher" for _, name in plan)
    assert {name for _, name in plan} == {"prepare_food", "put_fridge", "setup_table"}


def test_belief_seen_is_certain_and_unseen_is_unknown(episodes):
    episode = next(e for e in episodes if not e.params.full_observation)
    for state, belief in zip(episode.states, episode.beliefs):
        obs = observe(state, 0)
        for obj, loc in obs.visible:
            assert belief.location[obj] == loc == state.object_loc[obj]
        assert belief.seen >= obs.seen_furniture and obs.room in belief.visited
    first, start = episode.beliefs[0], episode.states[0]
    hidden = [o for o in range(len(start.object_loc)) if o not in first.location]
    assert hidden, "partial observation: something starts unseen"
    assert len(first.possible_locations(start, hidden[0])) > 1
    assert len(episode.beliefs[-1].known) > len(first.known)


def test_full_observation_belief_knows_everything():
    task = generate_task(apartment(2), "prepare_food", 0)
    state = task_state(task)
    belief = initial_belief(state, 0, full=True)
    assert belief.location == dict(enumerate(state.object_loc))


def test_belief_update_forgets_moved_objects():
    task = generate_task(apartment(0), "put_fridge", 0)
    state = task_state(task)
    belief = initial_belief(state, 0, full=True)
    # object 0 is no longer where it was seen, and the furniture is in view: forgotten
    obs = observe(state, 0, full=True)
    obs_without = obs.__class__(obs.room, tuple(v for v in obs.visible if v[0] != 0),
                                obs.holders, obs.seen_furniture, obs.open)
    assert 0 not in update_belief(belief, obs_without).location
    assert 1 in update_belief(belief, obs_without).location


def test_human_params_validate():
    with pytest.raises(ValueError, match="temperature"):
        HumanParams(temperature=0)
    with pytest.raises(ValueError, match="epsilon"):
        HumanParams(epsilon=1.5)


def test_mean_lengths_are_household_scale(episodes):
    lengths = np.array([e.length for e in episodes])
    assert 20 < lengths.mean() < 150


def test_action_probability_matches_distribution(episodes):
    from jaxtom.household.human import action_probability
    from jaxtom.household.world import Action
    episode = episodes[1]
    for t in range(0, episode.length, 7):
        state, belief = episode.states[t], episode.beliefs[t]
        dist = action_distribution(state, belief, episode.goal, episode.params)
        for action in list(dist)[:6] + [episode.actions[t]]:
            assert action_probability(state, belief, episode.goal, action,
                                      episode.params) == pytest.approx(dist[action], abs=1e-15)
        assert action_probability(state, belief, episode.goal, Action("grab", obj=10_000),
                                  episode.params) == 0.0
