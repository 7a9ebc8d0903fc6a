"""Household text: MindZero Figure 9's observation block and Figure 8's MMToM-QA paragraph.

Figure 9 form (type names as the simulator spells them, counts before names):
- `apartment_text(state, goal_types_only=True)`: "The apartment has 4 rooms: bathroom, ...",
  then per room "The kitchen has 1 fridge, 4 kitchencabinet, ..." (types sorted) and one line
  per piece holding goal-type objects: "- The fridge contains 1 plate, 2 cupcake." ("supports"
  for surfaces). The true state, as the proposal prompt shows it.
- `agent_text(state, agent=0, name="Human")`: "Human is in the kitchen.", "Human is close to
  1 fridge, 1 salmon." (the furniture it stands at or within `CLOSE_METRES`, and what is
  visible on/in it), "Human is holding nothing." / "Human is holding 1 plate."
- `action_text(state, action, name)`: "Human walks towards the kitchencabinet", "... towards
  the kitchen", "Human opens the fridge", "Human closes ...", "Human grabs the plate", "Human
  puts the plate in the fridge" / "on the kitchentable", "Human waits". These double as the
  short options an LLM likelihood scores.
- `key_action_history(states, actions, t, name)`: grabs and puts among actions[:t], one per
  line, consecutive repeats removed (O-WAH `actions_to_natlang`); "Human has not taken any key
  action yet." when there are none.
- `observation_text(episode, t)`: the Figure 9 block for step t: "[current state]" (state t,
  where action t is taken), "[key action history]" (before t), "[human's next action]"
  (action t). `episode` is anything with `states`, `actions` (e.g. `episodes.Episode`).

Figure 8 form (MMToM-QA; natural names, articles, number words, ordinals):
- `mmtom_apartment_text(state, all_objects=True)`: "What's inside the apartment: There is a
  kitchen and a bathroom ...", a paragraph per room ("four kitchen cabinets and a stove and a
  refrigerator ... are in the kitchen. a dish bowl and two wine glasses are on the first
  kitchen cabinet. There is nothing inside the stove.").
- `mmtom_actions_text(states, actions, name="Mary")`: "Actions taken by Mary: Mary is inside
  the bedroom. Mary walks towards the kitchen. Mary opens the first kitchen cabinet. ..."
  (a multi-step walk is one sentence).
"""

from __future__ import annotations

import math

from jaxtom.household import catalog
from jaxtom.household.world import Action, State

CLOSE_METRES = 1.5  # furniture this near the agent counts as "close" in the Figure 9 text
NO_KEY_ACTION = "{name} has not taken any key action yet."


def _counts(kinds) -> str:
    """'1 plate, 2 cupcake' in order of first appearance."""
    order: dict[str, int] = {}
    for k in kinds:
        order[k] = order.get(k, 0) + 1
    return ", ".join(f"{n} {k}" for k, n in order.items())


def apartment_text(state: State, goal_types_only: bool = True) -> str:
    """Figure 9's [current state] apartment part (module docstring)."""
    apt = state.apartment
    rooms = sorted(apt.rooms, key=lambda r: (r.kind, r.name))
    lines = [f"The apartment has {len(rooms)} rooms: {', '.join(r.kind for r in rooms)}."]
    for room in rooms:
        pieces = [apt.piece(f) for f in apt.furniture_in(room.name)]
        kinds = sorted(p.type for p in pieces)
        lines.append(f"The {room.kind} has {_counts(kinds)}." if kinds
                     else f"The {room.kind} has nothing.")
        for p in sorted(pieces, key=lambda p: (p.type, p.id)):
            inside = [state.object_types[o] for o in state.contents[p.id]
                      if not goal_types_only or state.object_types[o] in catalog.GOAL_OBJECT_TYPES]
            if inside:
                verb = "contains" if p.is_container else "supports"
                lines.append(f"- The {p.type} {verb} {_counts(inside)}.")
    return "\n\n".join(lines)


def close_furniture(state: State, agent: int = 0) -> tuple[int, ...]:
    """Furniture the agent is at or within CLOSE_METRES of, nearest first."""
    me = state.agents[agent]
    near = [(0.0 if f.id == me.close_to else math.dist(me.pos, f.position), f.id)
            for f in state.apartment.furniture if f.room == me.room]
    return tuple(fid for d, fid in sorted(near) if d <= CLOSE_METRES)


def agent_text(state: State, agent: int = 0, name: str = "Human") -> str:
    me = state.agents[agent]
    apt = state.apartment
    things = []
    for fid in close_furniture(state, agent):
        piece = apt.piece(fid)
        if not piece.is_container or fid in state.open:
            things += [state.object_types[o] for o in state.contents[fid]]
        things.append(piece.type)
    close = _counts(things) if things else "nothing"
    held = _counts(state.object_types[o] for o in me.holding) if me.holding else "nothing"
    return "\n\n".join([f"{name} is in the {apt.room(me.room).kind}.",
                        f"{name} is close to {close}.", f"{name} is holding {held}."])


def action_text(state: State, action: Action, name: str = "Human") -> str:
    """One action in words (module docstring); `state` names the objects and furniture."""
    apt = state.apartment
    if action.verb == "wait":
        return f"{name} waits"
    if action.verb == "walk":
        where = apt.room(action.room).kind if action.room else apt.piece(action.furniture).type
        return f"{name} walks towards the {where}"
    if action.verb in ("open", "close"):
        return f"{name} {action.verb}s the {apt.piece(action.furniture).type}"
    kind = state.object_types[action.obj]
    if action.verb == "grab":
        return f"{name} grabs the {kind}"
    piece = apt.piece(action.furniture)
    return f"{name} puts the {kind} {'in' if piece.is_container else 'on'} the {piece.type}"


def key_actions(states, actions, t: int, name: str = "Human") -> list[str]:
    """Key actions (grabs, puts) among actions[:t] in words, consecutive repeats removed."""
    out: list[str] = []
    for s, a in zip(states[:t], actions[:t]):
        if a.is_key:
            line = action_text(s, a, name)
            if not out or out[-1] != line:
                out.append(line)
    return out


def key_action_history(states, actions, t: int, name: str = "Human") -> str:
    lines = key_actions(states, actions, t, name)
    return "\n".join(lines) if lines else NO_KEY_ACTION.format(name=name)


def observation_text(episode, t: int, name: str = "Human", goal_types_only: bool = True) -> str:
    """Figure 9's information block at step t (module docstring)."""
    if not 0 <= t < len(episode.actions):
        raise ValueError(f"t must be in 0..{len(episode.actions) - 1}, got {t}")
    state = episode.states[t]
    return "\n\n".join([
        "[current state]", apartment_text(state, goal_types_only), agent_text(state, 0, name),
        "[key action history]", key_action_history(episode.states, episode.actions, t, name),
        "[human's next action]", action_text(state, episode.actions[t], name)])


# -- Figure 8 (MMToM-QA) --------------------------------------------------------------------
NATURAL = {"bathroomcabinet": "bathroom cabinet", "coffeetable": "coffee table",
           "fridge": "refrigerator", "kitchencabinet": "kitchen cabinet",
           "kitchentable": "kitchen table", "livingroom": "living room",
           "condimentbottle": "condiment bottle", "cutleryfork": "cutlery fork",
           "dishbowl": "dish bowl", "remotecontrol": "remote control",
           "waterglass": "water glass", "wineglass": "wine glass", "wine": "bottle of wine",
           "chips": "bag of chips"}
PLURAL = {"bottle of wine": "bottles of wine", "bag of chips": "bags of chips",
          "salmon": "salmon", "dish bowl": "dish bowls", "bathroom cabinet": "bathroom cabinets"}
NUMBER_WORDS = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
                "ten", "eleven", "twelve")
ORDINALS = ("first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth",
            "ninth", "tenth")


def natural(kind: str) -> str:
    return NATURAL.get(kind, kind)


def _plural(noun: str) -> str:
    if noun in PLURAL:
        return PLURAL[noun]
    return noun + ("es" if noun.endswith(("s", "sh", "ch", "x")) else "s")


def _article(noun: str) -> str:
    return ("an " if noun[0] in "aeiou" else "a ") + noun


def _quantity(kind: str, n: int) -> str:
    noun = natural(kind)
    if n == 1:
        return _article(noun)
    return f"{NUMBER_WORDS[n] if n < len(NUMBER_WORDS) else n} {_plural(noun)}"


def _grouped(kinds) -> tuple[str, int]:
    """'a dish bowl and two wine glasses' (first-appearance order) and the item count."""
    order: dict[str, int] = {}
    for k in kinds:
        order[k] = order.get(k, 0) + 1
    return " and ".join(_quantity(k, n) for k, n in order.items()), sum(order.values())


def furniture_name(state: State, fid: int) -> str:
    """'kitchen cabinet', or 'first kitchen cabinet' when the room has several."""
    apt = state.apartment
    piece = apt.piece(fid)
    same = [f for f in apt.furniture_in(piece.room) if apt.piece(f).type == piece.type]
    base = natural(piece.type)
    if len(same) == 1:
        return base
    index = same.index(fid)
    return f"{ORDINALS[index] if index < len(ORDINALS) else str(index + 1) + 'th'} {base}"


def _room_name(state: State, room: str) -> str:
    return natural(state.apartment.room(room).kind)


def mmtom_apartment_text(state: State, all_objects: bool = True) -> str:
    apt = state.apartment
    rooms = " and ".join(_article(_room_name(state, r.name)) for r in apt.rooms)
    paragraphs = [f"What's inside the apartment: There is {rooms}."]
    for room in apt.rooms:
        pieces = apt.furniture_in(room.name)
        if not pieces:
            continue
        listed, n = _grouped(apt.piece(f).type for f in pieces)
        sentences = [f"{listed} {'is' if n == 1 else 'are'} in the {_room_name(state, room.name)}."]
        for fid in pieces:
            piece = apt.piece(fid)
            inside = [state.object_types[o] for o in state.contents[fid]
                      if all_objects or state.object_types[o] in catalog.GOAL_OBJECT_TYPES]
            where = f"{'inside' if piece.is_container else 'on'} the {furniture_name(state, fid)}"
            if inside:
                listed, n = _grouped(inside)
                sentences.append(f"{listed} {'is' if n == 1 else 'are'} {where}.")
            elif piece.is_container:
                sentences.append(f"There is nothing {where}.")
        paragraphs.append(" ".join(sentences))
    return "\n\n".join(paragraphs)


def mmtom_action_sentence(state: State, action: Action, name: str = "Mary") -> str:
    apt = state.apartment
    if action.verb == "wait":
        return f"{name} waits."
    if action.verb == "walk":
        where = (_room_name(state, action.room) if action.room
                 else furniture_name(state, action.furniture))
        return f"{name} walks towards the {where}."
    if action.verb in ("open", "close"):
        return f"{name} {action.verb}s the {furniture_name(state, action.furniture)}."
    thing = natural(state.object_types[action.obj])
    if action.verb == "grab":
        return f"{name} grabs the {thing}."
    piece = apt.piece(action.furniture)
    return (f"{name} puts the {thing} {'inside' if piece.is_container else 'on'} the "
            f"{furniture_name(state, action.furniture)}.")


def mmtom_actions_text(states, actions, name: str = "Mary") -> str:
    """'Actions taken by Mary: Mary is inside the bedroom. Mary walks towards ...' (module
    docstring); `states[0]` gives the start room."""
    start = states[0].agents[0].room
    sentences = [f"{name} is inside the {_room_name(states[0], start)}."]
    previous = None
    for s, a in zip(states, actions):
        if a.verb == "walk" and a == previous:
            continue
        previous = a
        sentences.append(mmtom_action_sentence(s, a, name))
    return f"Actions taken by {name}: " + " ".join(sentences)
