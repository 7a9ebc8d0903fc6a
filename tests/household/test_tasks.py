import pytest

from jaxtom.household import catalog
from jaxtom.household.apartments import apartment, apartments
from jaxtom.household.tasks import (
    CLUTTER_RANGE, available_tasks, generate_task, scripted_solution, task_state,
)
from jaxtom.household.world import is_done, step

ALL_TASKS = catalog.MINDZERO_TASKS + ("watch_tv",)


def _tasks(seeds=range(8)):
    for apt in apartments():
        for name in available_tasks(apt, ALL_TASKS):
            for seed in seeds:
                yield generate_task(apt, name, seed)


def test_available_tasks_follow_the_furniture():
    assert "put_dishwasher" not in available_tasks(apartment(0))
    assert "put_dishwasher" not in available_tasks(apartment(5))
    assert "watch_tv" not in available_tasks(apartment(4), ALL_TASKS)
    assert set(available_tasks(apartment(3))) == set(catalog.MINDZERO_TASKS)
    with pytest.raises(ValueError, match="dishwasher"):
        generate_task(apartment(0), "put_dishwasher", 0)


def test_generated_tasks_follow_the_owah_generator():
    for task in _tasks():
        goal, apt = task.goal, task.apartment
        assert apt.has(goal.target) and goal.target in catalog.TASK_TARGETS[goal.task_name]
        assert {k for k, _ in goal.objects} <= set(catalog.TASK_OBJECTS[goal.task_name])
        counts = [c for _, c in goal.objects]
        placed = {}
        for kind, fid in task.placements:
            placed[kind] = placed.get(kind, 0) + 1
        if goal.task_name in ("setup_table", "prepare_food"):
            assert len(goal.objects) == 3 and len(set(counts)) == 1 and 1 <= counts[0] <= 3
            assert all(counts[0] <= placed[k] <= 5 for k, _ in goal.objects)
        elif goal.task_name == "watch_tv":
            assert dict(goal.objects) == {"chips": 1, "condimentbottle": 1, "remotecontrol": 1}
        else:
            assert 3 <= goal.total <= 7 and 1 <= len(goal.objects) <= 4
            assert all(placed[k] == n for k, n in goal.objects), "exactly the needed number"
        goal_types = {k for k, _ in goal.objects}
        clutter = sum(n for k, n in placed.items() if k not in goal_types)
        assert CLUTTER_RANGE[0] <= clutter <= CLUTTER_RANGE[1]
        for kind, fid in task.placements:
            if kind in goal_types:
                assert apt.piece(fid).type != goal.target, "goal objects never start on target"
        assert task.human_room != task.helper_room
        assert not is_done(task_state(task), goal)


def test_same_seed_same_task_and_seeds_differ():
    apt = apartment(1)
    assert generate_task(apt, "put_fridge", 5) == generate_task(apt, "put_fridge", 5)
    goals = {generate_task(apt, "put_fridge", s).goal for s in range(10)}
    assert len(goals) > 3


def test_every_generated_task_is_solvable():
    for task in _tasks(range(4)):
        state = task_state(task)
        for action in scripted_solution(task):
            state = step(state, 0, action)
        assert is_done(state, task.goal), task.goal.render()


def test_helper_start_state():
    task = generate_task(apartment(2), "setup_table", 3)
    state = task_state(task, with_helper=True)
    assert [a.room for a in state.agents] == [task.human_room, task.helper_room]
