"""The symbolic household world: state, actions, transition, observation and goal progress.

Everything is a small immutable value, so a recorded episode is just a tuple of states and a
planner can branch without copying. Pure Python: the hot path (the human's policy, replayed per
hypothesis) is a few dozen distance lookups per step.

Public API
- `Action` (hashable, ordered) and constructors `walk_to(fid)`, `walk_to_room(room)`,
  `open_(fid)`, `close(fid)`, `grab(obj)`, `put(obj, piece)` (putin for a container, putback
  for a surface), `WAIT`.
- `AgentState`, `State` (objects by index: type and location = furniture id or `HELD`; open
  containers; agents, each with a position, its room, the furniture it is close to, two hands,
  and the walk under way, `heading`, which a walk sets until arrival and any other action
  clears: observable, so a policy may prefer finishing it without hidden state).
- `initial_state(apartment, placements, agent_rooms)`, `add_agent(state, room)`.
- `step(state, agent, action, walk_metres=WALK_METRES) -> State`: raises `ActionError` naming
  the failed precondition. Walking advances at most `walk_metres` along the path
  (`Apartment.waypoints`); being "close" to a piece of furniture means having arrived at it.
  Grab needs a free hand, closeness, and the object not inside a closed container; putin needs
  the container open; open/close need a free hand (as VirtualHome does).
- `legal_actions(state, agent)`: every action `step` accepts (the ε-noise support).
- `Observation`, `observe(state, agent, full=False)`: the partial view of O-WAH's
  `_mask_state` (everything in the agent's room except what is directly inside a closed
  container, plus held objects); `full=True` sees everything.
- `count_at_target(state, goal, kind)`, `progress(state, goal)` (type -> (placed, needed)),
  `satisfied(state, goal)` (placed objects, capped per type), `is_done(state, goal)`: any
  instance of the target type counts (O-WAH `check_progress2`).
"""

from __future__ import annotations

import dataclasses
import functools
import math

from jaxtom.household.apartments import Apartment
from jaxtom.household.goals import Goal

WALK_METRES = 2.5  # metres per walk step (Unity's is not public; tuned for ~50-120 step episodes)
HELD = -1  # object location while in a hand
NOBODY = -1  # an empty hand / no furniture close by

VERBS = ("walk", "open", "close", "grab", "putin", "putback", "wait")


class ActionError(ValueError):
    """An action whose precondition fails in the given state; the message names it."""


@dataclasses.dataclass(frozen=True, order=True)
class Action:
    """`verb` with its arguments: `furniture` (walk/open/close/put target), `obj` (grab/put),
    `room` (walk to a room's centre). Unused fields keep their defaults, so actions compare,
    hash and sort (a dict of action -> probability iterates in a fixed order)."""

    verb: str
    furniture: int = NOBODY
    obj: int = NOBODY
    room: str = ""

    def __post_init__(self):
        if self.verb not in VERBS:
            raise ValueError(f"unknown verb {self.verb!r}; expected one of {', '.join(VERBS)}")

    @property
    def is_key(self) -> bool:
        """Grabs and puts: MindZero's key actions."""
        return self.verb in ("grab", "putin", "putback")


def walk_to(fid: int) -> Action:
    return Action("walk", furniture=fid)


def walk_to_room(room: str) -> Action:
    return Action("walk", room=room)


def open_(fid: int) -> Action:
    return Action("open", furniture=fid)


def close(fid: int) -> Action:
    return Action("close", furniture=fid)


def grab(obj: int) -> Action:
    return Action("grab", obj=obj)


def put(obj: int, piece) -> Action:
    """putin for a container, putback for a surface (`piece` is a `Furniture`)."""
    return Action("putin" if piece.is_container else "putback", furniture=piece.id, obj=obj)


WAIT = Action("wait")


@dataclasses.dataclass(frozen=True)
class AgentState:
    pos: tuple[float, float]
    room: str
    close_to: int = NOBODY  # furniture id the agent has arrived at
    hands: tuple[int, int] = (NOBODY, NOBODY)  # object indices
    heading: Action | None = None  # the walk under way (set mid-walk, cleared on arrival)

    @property
    def holding(self) -> tuple[int, ...]:
        return tuple(o for o in self.hands if o != NOBODY)

    @property
    def free_hand(self) -> bool:
        return NOBODY in self.hands


@dataclasses.dataclass(frozen=True)
class State:
    """Objects are indices 0..K-1 into `object_types`/`object_loc`; agent 0 is the human."""

    apartment: Apartment
    object_types: tuple[str, ...]
    object_loc: tuple[int, ...]  # furniture id, or HELD
    open: frozenset[int]
    agents: tuple[AgentState, ...]

    @functools.cached_property
    def contents(self) -> dict[int, tuple[int, ...]]:
        """furniture id -> objects on/in it."""
        out: dict[int, list[int]] = {f.id: [] for f in self.apartment.furniture}
        for obj, loc in enumerate(self.object_loc):
            if loc != HELD:
                out[loc].append(obj)
        return {k: tuple(v) for k, v in out.items()}

    def holder(self, obj: int) -> int:
        """The agent holding `obj`, or NOBODY."""
        for i, a in enumerate(self.agents):
            if obj in a.hands:
                return i
        return NOBODY

    def is_open(self, fid: int) -> bool:
        return fid in self.open

    def accessible(self, obj: int) -> bool:
        """Not held and not inside a closed container."""
        loc = self.object_loc[obj]
        if loc == HELD:
            return False
        return not self.apartment.piece(loc).is_container or loc in self.open


def initial_state(apartment: Apartment, placements, agent_rooms) -> State:
    """Objects placed as (type, furniture id) pairs, every container closed, each agent at the
    centre of its room (agent 0 is the human)."""
    types, locs = [], []
    for kind, fid in placements:
        apartment.piece(fid)
        types.append(kind)
        locs.append(fid)
    agents = tuple(AgentState(apartment.room(r).center, r) for r in agent_rooms)
    return State(apartment, tuple(types), tuple(locs), frozenset(), agents)


def add_agent(state: State, room: str) -> State:
    """`state` with one more agent (e.g. a helper) at the centre of `room`."""
    agent = AgentState(state.apartment.room(room).center, room)
    return dataclasses.replace(state, agents=state.agents + (agent,))


def _target_point(apt: Apartment, action: Action):
    if action.room:
        return apt.room(action.room).center, action.room
    piece = apt.piece(action.furniture)
    return piece.position, piece.room


def _walk(state: State, agent: AgentState, action: Action, walk_metres: float) -> AgentState:
    apt = state.apartment
    target, target_room = _target_point(apt, action)
    if (agent.close_to == action.furniture if not action.room
            else math.dist(agent.pos, target) < 1e-9):
        raise ActionError(f"walk: already at the {action.room or apt.piece(action.furniture).type}")
    left, here = walk_metres, agent.pos
    for point in apt.waypoints(here, target, target_room):
        leg = math.dist(here, point)
        if leg <= left + 1e-5:  # positions are rounded to 1e-6
            left -= leg
            here = point
            continue
        frac = left / leg
        here = (here[0] + frac * (point[0] - here[0]), here[1] + frac * (point[1] - here[1]))
        here = (round(here[0], 6), round(here[1], 6))
        return dataclasses.replace(agent, pos=here, room=apt.room_at(here), close_to=NOBODY,
                                   heading=action)
    arrived = NOBODY if action.room else action.furniture
    return dataclasses.replace(agent, pos=tuple(target), room=target_room, close_to=arrived,
                               heading=None)


def _require(ok: bool, message: str):
    if not ok:
        raise ActionError(message)


def _check_close(state, agent: AgentState, fid: int, verb: str):
    piece = state.apartment.piece(fid)
    _require(agent.close_to == fid, f"{verb}: not close to the {piece.type} {fid}")
    return piece


def step(state: State, agent: int, action: Action, walk_metres: float = WALK_METRES) -> State:
    """The state after agent `agent` takes `action` (ActionError if a precondition fails)."""
    me = state.agents[agent]
    new_me, locs, opened = me, state.object_loc, state.open
    if action.verb == "wait":
        if me.heading is None:
            return state
        new_me = dataclasses.replace(me, heading=None)
    elif action.verb == "walk":
        new_me = _walk(state, me, action, walk_metres)
    elif action.verb in ("open", "close"):
        new_me = dataclasses.replace(me, heading=None)
        piece = _check_close(state, me, action.furniture, action.verb)
        _require(piece.is_container, f"{action.verb}: the {piece.type} is not a container")
        _require(me.free_hand, f"{action.verb}: both hands are full")
        is_open = piece.id in state.open
        _require(is_open == (action.verb == "close"),
                 f"{action.verb}: the {piece.type} {piece.id} is already "
                 f"{'open' if is_open else 'closed'}")
        opened = opened | {piece.id} if action.verb == "open" else opened - {piece.id}
    elif action.verb == "grab":
        obj = action.obj
        _require(0 <= obj < len(locs), f"grab: no object {obj}")
        kind = state.object_types[obj]
        _require(locs[obj] != HELD, f"grab: the {kind} {obj} is already held")
        piece = _check_close(state, me, locs[obj], "grab")
        _require(not piece.is_container or piece.id in opened,
                 f"grab: the {kind} {obj} is inside the closed {piece.type}")
        _require(me.free_hand, "grab: no free hand")
        hand = me.hands.index(NOBODY)
        hands = tuple(obj if i == hand else o for i, o in enumerate(me.hands))
        new_me = dataclasses.replace(me, hands=hands, heading=None)
        locs = locs[:obj] + (HELD,) + locs[obj + 1:]
    else:  # putin / putback
        obj = action.obj
        _require(obj in me.holding, f"{action.verb}: not holding object {obj}")
        piece = _check_close(state, me, action.furniture, action.verb)
        expected = "putin" if piece.is_container else "putback"
        _require(action.verb == expected, f"{action.verb}: use {expected} for the {piece.type}")
        _require(not piece.is_container or piece.id in opened,
                 f"putin: the {piece.type} {piece.id} is closed")
        hands = tuple(NOBODY if o == obj else o for o in me.hands)
        new_me = dataclasses.replace(me, hands=hands, heading=None)
        locs = locs[:obj] + (piece.id,) + locs[obj + 1:]
    agents = state.agents[:agent] + (new_me,) + state.agents[agent + 1:]
    return dataclasses.replace(state, object_loc=locs, open=frozenset(opened), agents=agents)


def legal_actions(state: State, agent: int) -> tuple[Action, ...]:
    """Every action `step` accepts for `agent`, sorted (waiting included)."""
    me = state.agents[agent]
    apt = state.apartment
    out = [WAIT]
    out += [walk_to(f.id) for f in apt.furniture if f.id != me.close_to]
    out += [walk_to_room(r.name) for r in apt.rooms if math.dist(me.pos, r.center) > 1e-9]
    if me.close_to != NOBODY:
        piece = apt.piece(me.close_to)
        is_open = piece.id in state.open
        if piece.is_container and me.free_hand:
            out.append(close(piece.id) if is_open else open_(piece.id))
        if me.free_hand and (not piece.is_container or is_open):
            out += [grab(o) for o in state.contents[piece.id]]
        if not piece.is_container or is_open:
            out += [put(o, piece) for o in me.holding]
    return tuple(sorted(out))


@dataclasses.dataclass(frozen=True)
class Observation:
    """What one agent sees: its room, the visible objects' locations (furniture id or HELD,
    with `holders` for held ones), the furniture whose whole contents are in view (surfaces
    and open containers of the room), and which visible containers are open."""

    room: str
    visible: tuple[tuple[int, int], ...]  # (object, location)
    holders: tuple[tuple[int, int], ...]  # (object, agent) for visible held objects
    seen_furniture: frozenset[int]
    open: frozenset[int]


def observe(state: State, agent: int, full: bool = False) -> Observation:
    """The agent's view (module docstring); `full=True` is the fully observed mode."""
    apt = state.apartment
    me = state.agents[agent]
    if full:
        seen = frozenset(f.id for f in apt.furniture)
        rooms = {r.name for r in apt.rooms}
    else:
        rooms = {me.room}
        seen = frozenset(f.id for f in apt.furniture if f.room == me.room
                         and (not f.is_container or f.id in state.open))
    visible = [(o, loc) for o, loc in enumerate(state.object_loc) if loc != HELD and loc in seen]
    holders = []
    for i, a in enumerate(state.agents):
        if i == agent or a.room in rooms:
            for o in a.holding:
                visible.append((o, HELD))
                holders.append((o, i))
    in_view = frozenset(f.id for f in apt.furniture if f.room in rooms)
    return Observation(me.room, tuple(sorted(visible)), tuple(sorted(holders)), seen,
                       frozenset(state.open & in_view))


def count_at_target(state: State, goal: Goal, kind: str) -> int:
    """Objects of `kind` on/in any instance of the goal's target type."""
    targets = set(state.apartment.furniture_of_type(goal.target))
    return sum(1 for t, loc in zip(state.object_types, state.object_loc)
               if t == kind and loc in targets)


def progress(state: State, goal: Goal) -> dict[str, tuple[int, int]]:
    """type -> (placed, needed) for every object type of the goal."""
    return {kind: (count_at_target(state, goal, kind), n) for kind, n in goal.objects}


def satisfied(state: State, goal: Goal) -> int:
    """Placed goal objects, each type counted up to its required count."""
    return sum(min(placed, need) for placed, need in progress(state, goal).values())


def is_done(state: State, goal: Goal) -> bool:
    return all(placed >= need for placed, need in progress(state, goal).values())
