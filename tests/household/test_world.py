import json
import math

import pytest

from jaxtom.household import catalog
from jaxtom.household.apartments import (
    NUM_APARTMENTS, TEST_APARTMENTS, TRAIN_APARTMENTS, LayoutError, apartment, apartments,
    layout_dict, load_layout, parse_layout, save_layout,
)
from jaxtom.household.goals import Goal
from jaxtom.household.world import (
    HELD, WAIT, Action, ActionError, close, grab, initial_state, is_done, legal_actions, observe,
    open_, progress, put, step, walk_to, walk_to_room,
)


def _ids(apt, kind):
    return apt.furniture_of_type(kind)


def test_splits_are_disjoint_and_cover_all():
    assert set(TRAIN_APARTMENTS).isdisjoint(TEST_APARTMENTS)
    assert sorted(TRAIN_APARTMENTS + TEST_APARTMENTS) == list(range(NUM_APARTMENTS))


def test_apartment_facts_mirror_owah():
    apts = apartments()
    for apt in apts:
        assert {r.kind for r in apt.rooms} == set(catalog.ROOMS)
        for kind in ("fridge", "stove", "microwave", "kitchentable"):
            assert any(apt.piece(f).room == "kitchen" for f in _ids(apt, kind)), (apt.name, kind)
        assert len(_ids(apt, "bathroomcabinet")) == 1 and len(_ids(apt, "cabinet")) == 1
    assert len(_ids(apts[0], "kitchencabinet")) == 4 and not apts[0].has("dishwasher")
    assert not apts[5].has("kitchencabinet") and not apts[5].has("dishwasher")
    assert not apts[4].has("coffeetable")
    assert len(_ids(apts[6], "fridge")) == 2
    assert len(apts[2].rooms) == 5 and len(_ids(apts[2], "kitchentable")) == 2
    for i in (1, 2, 3, 4, 6):
        assert len(_ids(apts[i], "kitchencabinet")) == 8 and apts[i].has("dishwasher")


def test_layout_round_trip(tmp_path):
    apt = apartment(3)
    path = tmp_path / "apt3.json"
    save_layout(apt, path)
    assert load_layout(path) == apt


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.setdefault("objects", []).append({"type": "plate", "furniture": 999}),
     "dangling container reference: furniture id 999"),
    (lambda d: d["furniture"][0].update(type="bookshelf"), "unknown furniture type 'bookshelf'"),
    (lambda d: d["furniture"][0].update(room="garage"), "room 'garage' does not exist"),
    (lambda d: d["furniture"][1].update(id=0), "duplicate furniture id 0"),
    (lambda d: d["furniture"][0].update(position=[100.0, 100.0]), "nearer the centre of"),
    (lambda d: d.setdefault("objects", []).append({"type": "sword", "furniture": 0}),
     "unknown object type 'sword'"),
    (lambda d: d["rooms"][0].pop("center"), "missing field 'center'"),
])
def test_bad_layout_files_get_clear_errors(tmp_path, edit, message):
    data = layout_dict(apartment(0))
    edit(data)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(data))
    with pytest.raises(LayoutError, match=message.replace("(", r"\(").replace(")", r"\)")):
        load_layout(path)


def test_layout_objects_are_placed():
    data = layout_dict(apartment(0))
    fridge = _ids(apartment(0), "fridge")[0]
    data["objects"] = [{"type": "apple", "furniture": fridge}]
    apt = parse_layout(data)
    state = initial_state(apt, apt.placements, ["kitchen"])
    assert state.object_loc == (fridge,) and state.object_types == ("apple",)


def _scene():
    """Apartment 0: an apple in the fridge, a plate on the bedroom coffeetable, human in the
    kitchen."""
    apt = apartment(0)
    fridge = _ids(apt, "fridge")[0]
    bedroom_table = [f for f in _ids(apt, "coffeetable") if apt.piece(f).room == "bedroom"][0]
    state = initial_state(apt, [("apple", fridge), ("plate", bedroom_table)], ["kitchen"])
    return apt, state, fridge, bedroom_table


def _walk_until_close(state, fid, agent=0):
    steps = 0
    while state.agents[agent].close_to != fid:
        before = state.agents[agent].pos
        state = step(state, agent, walk_to(fid))
        assert math.dist(before, state.agents[agent].pos) <= 2.5 + 1e-6
        steps += 1
        assert steps < 50
    return state, steps


def test_walk_progress_and_arrival():
    apt, state, fridge, table = _scene()
    state, steps = _walk_until_close(state, table)
    assert steps >= 2, "a walk into another room takes several steps"
    assert state.agents[0].room == "bedroom" and state.agents[0].heading is None
    with pytest.raises(ActionError, match="already at"):
        step(state, 0, walk_to(table))
    mid = step(state, 0, walk_to(fridge))
    assert mid.agents[0].close_to == -1 and mid.agents[0].heading == walk_to(fridge)


def test_preconditions_name_what_failed():
    apt, state, fridge, table = _scene()
    with pytest.raises(ActionError, match="not close to the fridge"):
        step(state, 0, open_(fridge))
    state, _ = _walk_until_close(state, fridge)
    with pytest.raises(ActionError, match="inside the closed fridge"):
        step(state, 0, grab(0))
    with pytest.raises(ActionError, match="already closed"):
        step(state, 0, close(fridge))
    state = step(state, 0, open_(fridge))
    state = step(state, 0, grab(0))
    assert state.object_loc[0] == HELD and state.agents[0].holding == (0,)
    state = step(state, 0, close(fridge))
    with pytest.raises(ActionError, match="is closed"):
        step(state, 0, put(0, apt.piece(fridge)))
    with pytest.raises(ActionError, match="use putin"):
        step(state, 0, Action("putback", furniture=fridge, obj=0))
    state = step(state, 0, open_(fridge))
    state = step(state, 0, put(0, apt.piece(fridge)))
    assert state.object_loc[0] == fridge and state.agents[0].holding == ()


def test_two_hands():
    apt = apartment(0)
    table = _ids(apt, "kitchentable")[0]
    state = initial_state(apt, [("plate", table)] * 3, ["kitchen"])
    state, _ = _walk_until_close(state, table)
    state = step(step(state, 0, grab(0)), 0, grab(1))
    assert state.agents[0].holding == (0, 1)
    with pytest.raises(ActionError, match="no free hand"):
        step(state, 0, grab(2))
    assert all(a.verb != "grab" for a in legal_actions(state, 0))


def test_partial_observation_hides_closed_containers_and_other_rooms():
    apt, state, fridge, table = _scene()
    seen = dict(observe(state, 0).visible)
    assert 0 not in seen, "the apple is inside the closed fridge"
    assert 1 not in seen, "the plate is in another room"
    assert set(dict(observe(state, 0, full=True).visible)) == {0, 1}
    state, _ = _walk_until_close(state, fridge)
    state = step(state, 0, open_(fridge))
    assert dict(observe(state, 0).visible)[0] == fridge
    state, _ = _walk_until_close(state, table)
    obs = observe(state, 0)
    assert dict(obs.visible)[1] == table and 0 not in dict(obs.visible)
    assert table in obs.seen_furniture


def test_held_objects_are_visible():
    apt = apartment(0)
    table = _ids(apt, "kitchentable")[0]
    state = initial_state(apt, [("plate", table)], ["kitchen"])
    state, _ = _walk_until_close(state, table)
    state = step(state, 0, grab(0))
    state = step(state, 0, walk_to_room("bathroom"))
    assert dict(observe(state, 0).visible) == {0: HELD}


def test_progress_counts_any_target_instance():
    apt = apartment(6)
    f1, f2 = _ids(apt, "fridge")
    table = _ids(apt, "kitchentable")[0]
    goal = Goal.make("put_fridge", {"apple": 2}, "fridge")
    state = initial_state(apt, [("apple", f1), ("apple", f2), ("apple", table)], ["kitchen"])
    assert progress(state, goal) == {"apple": (2, 2)} and is_done(state, goal)
    state = initial_state(apt, [("apple", f1), ("apple", table)], ["kitchen"])
    assert not is_done(state, goal)


def test_legal_actions_all_step():
    apt, state, fridge, _ = _scene()
    state, _ = _walk_until_close(state, fridge)
    state = step(state, 0, open_(fridge))
    for s in (state, step(state, 0, grab(0))):
        actions = legal_actions(s, 0)
        assert WAIT in actions and actions == tuple(sorted(actions))
        for a in actions:
            step(s, 0, a)
