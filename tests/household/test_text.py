import pytest

from jaxtom.household.apartments import apartment
from jaxtom.household.episodes import Episode
from jaxtom.household.human import HumanParams, initial_belief
from jaxtom.household.tasks import Task
from jaxtom.household.goals import Goal
from jaxtom.household.text import (
    action_text, agent_text, apartment_text, key_action_history, key_actions,
    mmtom_actions_text, mmtom_apartment_text, observation_text,
)
from jaxtom.household.world import (
    WAIT, grab, initial_state, open_, put, step, walk_to, walk_to_room,
)

APT = apartment(0)
FRIDGE = APT.furniture_of_type("fridge")[0]
TABLE = APT.furniture_of_type("kitchentable")[0]
CABINETS = APT.furniture_of_type("kitchencabinet")


def _state():
    placements = [("plate", FRIDGE), ("cupcake", FRIDGE), ("cupcake", FRIDGE), ("wine", FRIDGE),
                  ("apple", CABINETS[0]), ("book", CABINETS[1])]
    return initial_state(APT, placements, ["bedroom"])


def _episode(state, actions):
    states = [state]
    for a in actions:
        states.append(step(states[-1], 0, a))
    task = Task(APT, Goal.make("put_fridge", {"apple": 1}, "fridge"), (), "bedroom", "bathroom",
                0)
    beliefs = tuple(initial_belief(s) for s in states)
    return Episode(task, HumanParams(), tuple(actions), tuple(states), beliefs, 0)


def test_apartment_text_matches_figure_9():
    text = apartment_text(_state())
    assert text.startswith("The apartment has 4 rooms: bathroom, bedroom, kitchen, livingroom.")
    assert ("The kitchen has 1 fridge, 4 kitchencabinet, 1 kitchentable, 1 microwave, "
            "1 stove.") in text
    assert "- The fridge contains 1 plate, 2 cupcake." in text, "wine is not a goal type"
    assert "- The kitchencabinet contains 1 apple." in text
    assert "book" not in text
    assert "The bedroom has 1 coffeetable, 1 desk." in text
    assert "book" in apartment_text(_state(), goal_types_only=False)


def test_agent_text_close_and_holding():
    state = _state()
    assert agent_text(state) == ("Human is in the bedroom.\n\nHuman is close to 1 coffeetable.\n\n"
                                 "Human is holding nothing.")
    while state.agents[0].close_to != FRIDGE:
        state = step(state, 0, walk_to(FRIDGE))
    state = step(step(state, 0, open_(FRIDGE)), 0, grab(0))
    text = agent_text(state)
    assert "Human is in the kitchen." in text and "Human is holding 1 plate." in text
    assert "2 cupcake" in text and "1 fridge" in text


def test_action_strings():
    state = _state()
    fridge = APT.piece(FRIDGE)
    assert action_text(state, walk_to(CABINETS[0])) == "Human walks towards the kitchencabinet"
    assert action_text(state, walk_to_room("kitchen")) == "Human walks towards the kitchen"
    assert action_text(state, open_(FRIDGE)) == "Human opens the fridge"
    assert action_text(state, grab(0)) == "Human grabs the plate"
    assert action_text(state, put(0, fridge)) == "Human puts the plate in the fridge"
    assert (action_text(state, put(0, APT.piece(TABLE)))
            == "Human puts the plate on the kitchentable")
    assert action_text(state, WAIT, "Mary") == "Mary waits"


def _fetch_plate_actions():
    walks = []
    state = _state()
    while state.agents[0].close_to != FRIDGE:
        walks.append(walk_to(FRIDGE))
        state = step(state, 0, walks[-1])
    table_walks = []
    s2 = step(step(state, 0, open_(FRIDGE)), 0, grab(0))
    while s2.agents[0].close_to != TABLE:
        table_walks.append(walk_to(TABLE))
        s2 = step(s2, 0, table_walks[-1])
    return walks + [open_(FRIDGE), grab(0)] + table_walks + [put(0, APT.piece(TABLE))]


def test_key_action_history_and_observation_block():
    actions = _fetch_plate_actions()
    episode = _episode(_state(), actions)
    assert key_action_history(episode.states, episode.actions, 0) == (
        "Human has not taken any key action yet.")
    assert key_actions(episode.states, episode.actions, len(actions)) == [
        "Human grabs the plate", "Human puts the plate on the kitchentable"]
    t = len(actions) - 1
    block = observation_text(episode, t)
    assert block.index("[current state]") < block.index("[key action history]") < block.index(
        "[human's next action]")
    assert "Human grabs the plate\n\n[human's next action]" in block
    assert block.endswith("Human puts the plate on the kitchentable")
    with pytest.raises(ValueError, match="t must be"):
        observation_text(episode, len(actions))


def test_repeated_key_actions_are_removed():
    state = initial_state(APT, [("plate", TABLE)], ["kitchen"])
    while state.agents[0].close_to != TABLE:
        state = step(state, 0, walk_to(TABLE))
    table = APT.piece(TABLE)
    actions = [grab(0), put(0, table), put(0, table).__class__("grab", obj=0)]
    states = [state]
    for a in actions:
        states.append(step(states[-1], 0, a))
    lines = key_actions(states, actions, 3)
    assert lines == ["Human grabs the plate", "Human puts the plate on the kitchentable",
                     "Human grabs the plate"]
    doubled = key_actions(states[:1] * 2, actions[:1] * 2, 2)
    assert doubled == ["Human grabs the plate"]


def test_mmtom_text_matches_figure_8():
    text = mmtom_apartment_text(_state())
    assert text.startswith("What's inside the apartment: There is a kitchen and a bathroom and "
                           "a bedroom and a living room.")
    assert ("a refrigerator and a stove and a microwave and a kitchen table and four kitchen "
            "cabinets are in the kitchen.") in text
    assert ("a plate and two cupcakes and a bottle of wine are inside the refrigerator."
            in text)
    assert "an apple is inside the first kitchen cabinet." in text
    assert "There is nothing inside the stove." in text
    assert "a bathroom cabinet is in the bathroom." in text
    state, walks = _state(), []
    for target in (walk_to_room("kitchen"), walk_to(CABINETS[0])):
        while not walks or walks[-1] != target or state.agents[0].heading == target:
            walks.append(target)
            state = step(state, 0, target)
    assert walks.count(walk_to_room("kitchen")) > 1, "a multi-step walk"
    episode = _episode(_state(), walks + [open_(CABINETS[0])])
    actions = mmtom_actions_text(episode.states, episode.actions)
    assert actions == ("Actions taken by Mary: Mary is inside the bedroom. Mary walks towards "
                       "the kitchen. Mary walks towards the first kitchen cabinet. Mary opens "
                       "the first kitchen cabinet.")
