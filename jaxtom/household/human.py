"""The goal-conditioned human: a noisy greedy subgoal planner with a belief over object locations.

O-WAH's human runs MCTS over subgoals "put one goal instance to the target"; this is the
simplest faithful stand-in (notes section 6) whose action distribution is exact and cheap, so
the symbolic likelihood `P(a_t | goal, state, belief)` is the policy itself.

Belief (`Belief`, `initial_belief`, `update_belief`): the last seen location of every object
the human has seen, the furniture whose contents it has seen, and the rooms it has entered.
Seen means certain; an unseen object may be in any furniture not yet looked into (a uniform
prior, as O-WAH's belief). The belief depends on observations only, never on the goal, so one
recorded belief per step serves every goal hypothesis.

Policy (`action_distribution(state, belief, goal, params)`):
- needs per goal type = count - objects the human believes are on/in a target instance;
  nothing needed -> wait;
- holding a needed object -> subgoals "deliver to target instance t";
  holding something else -> "put it down on the nearest free surface / open container";
- empty-handed -> subgoals "fetch known object o" (walk to it, open its container, grab;
  cost includes carrying it to the nearest target) and, while some type has fewer known
  instances than needed, "search": walk into an unvisited room, or walk to and open an unseen
  container in a visited room (cost plus `search_penalty` and the delivery estimate);
- a subgoal's cost is in steps (metres / walk_metres, +1 per open/grab/put), less
  `commitment` for one that continues the walk under way (`AgentState.heading`) or acts on
  the furniture just reached (so the human does not dither between neighbours); subgoals are
  chosen by a Boltzmann distribution with `temperature`, each mapped to its next action
  (several subgoals may share one);
- with probability `epsilon` a uniformly random legal action (`world.legal_actions`).
One object at a time: a held goal object is always delivered before the next grab.

`sample_action(dist, rng)` draws from the distribution in the fixed action order.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

from jaxtom.household.goals import Goal
from jaxtom.household.world import (
    HELD, WAIT, WALK_METRES, Action, Observation, State, legal_actions, observe, open_,
    put, walk_to, walk_to_room,
)
from jaxtom.household.world import grab as grab_action


@dataclasses.dataclass(frozen=True)
class HumanParams:
    temperature: float = 0.5  # Boltzmann temperature over subgoal costs, in steps
    epsilon: float = 0.05  # probability of a uniformly random legal action
    search_penalty: float = 2.0  # steps added to a search subgoal (the object may not be there)
    commitment: float = 1.5  # steps taken off the subgoal that continues the walk under way
    walk_metres: float = WALK_METRES
    # the paper's domain is partially observable (section 5.3); O-WAH's code runs full
    full_observation: bool = False

    def __post_init__(self):
        if not self.temperature > 0:
            raise ValueError(f"temperature must be > 0, got {self.temperature}")
        if not 0 <= self.epsilon <= 1:
            raise ValueError(f"epsilon must be in [0, 1], got {self.epsilon}")


@dataclasses.dataclass(frozen=True)
class Belief:
    """`known`: (object, believed furniture id or HELD) for every object seen, sorted;
    `holders`: (object, agent) for objects believed held; `seen`: furniture whose contents
    were observed; `visited`: rooms entered."""

    known: tuple[tuple[int, int], ...] = ()
    holders: tuple[tuple[int, int], ...] = ()
    seen: frozenset[int] = frozenset()
    visited: frozenset[str] = frozenset()

    @functools.cached_property
    def location(self) -> dict[int, int]:
        return dict(self.known)

    def believed_at(self, fid: int) -> tuple[int, ...]:
        """Objects believed on/in furniture `fid`."""
        return tuple(o for o, loc in self.known if loc == fid)

    def possible_locations(self, state: State, obj: int) -> tuple[int, ...]:
        """Furniture ids where the human thinks `obj` may be: its last seen place if seen,
        otherwise every piece whose contents it has not seen (uniform belief)."""
        if obj in self.location:
            loc = self.location[obj]
            return () if loc == HELD else (loc,)
        return tuple(f.id for f in state.apartment.furniture if f.id not in self.seen)

    def thinks_inside(self, state: State, obj: int, fid: int) -> float:
        """The human's probability that `obj` is on/in `fid` (uniform over possibilities)."""
        places = self.possible_locations(state, obj)
        return 1.0 / len(places) if fid in places else 0.0


def update_belief(belief: Belief, obs: Observation) -> Belief:
    """Seen -> certain: forget what was believed on furniture now in view, add what is seen."""
    known = {o: loc for o, loc in belief.known if loc not in obs.seen_furniture}
    holders = dict(belief.holders)
    for o, loc in obs.visible:
        known[o] = loc
        if loc != HELD:
            holders.pop(o, None)
    holders.update(dict(obs.holders))
    return Belief(tuple(sorted(known.items())), tuple(sorted(holders.items())),
                  belief.seen | obs.seen_furniture, belief.visited | {obs.room})


def initial_belief(state: State, agent: int = 0, full: bool = False) -> Belief:
    """The belief after the agent's first look (nothing known before it)."""
    return update_belief(Belief(), observe(state, agent, full))


@dataclasses.dataclass(frozen=True)
class _Subgoal:
    cost: float
    action: Action


def _memo(state: State, key, build):
    """A goal-independent table computed once per state (stored beside the frozen fields, so
    replaying many goal hypotheses over one episode reuses it; equality and hashing ignore
    it)."""
    cache = state.__dict__.setdefault("_memo", {})
    if key not in cache:
        cache[key] = build()
    return cache[key]


def _walk_steps(state: State, agent, fid: int, params: HumanParams) -> float:
    """Walk steps from the agent to furniture `fid` (0 when already there)."""
    def build():
        apt = state.apartment
        return {f.id: 0.0 if agent.close_to == f.id else
                apt.path_length(agent.pos, f.position, f.room) / params.walk_metres
                for f in apt.furniture}
    return _memo(state, ("walk", agent.pos, agent.close_to, params.walk_metres), build)[fid]


def _open_cost(state: State, fid: int) -> float:
    piece = state.apartment.piece(fid)
    return 1.0 if piece.is_container and fid not in state.open else 0.0


def _deliver_from(state: State, fid_or_room, targets, params: HumanParams) -> float:
    """Steps to carry an object from a piece of furniture (or a room centre) to the nearest
    target instance and put it there."""
    def build():
        apt = state.apartment
        table = {}
        for f in apt.furniture:
            table[f.id] = min(apt.furniture_distance[(f.id, t)] / params.walk_metres
                              + _open_cost(state, t) + 1.0 for t in targets)
        for r in apt.rooms:
            table[r.name] = min(
                apt.path_length(r.center, apt.piece(t).position, apt.piece(t).room)
                / params.walk_metres + _open_cost(state, t) + 1.0 for t in targets)
        return table
    return _memo(state, ("deliver", tuple(targets), params.walk_metres), build)[fid_or_room]


def _approach(state: State, agent, fid: int, then: Action) -> Action:
    """Next action toward using furniture `fid`: walk there, open it if closed, then `then`."""
    if agent.close_to != fid:
        return walk_to(fid)
    if _open_cost(state, fid):
        return open_(fid)
    return then


def needs(state: State, belief: Belief, goal: Goal) -> dict[str, int]:
    """type -> how many more the human believes must reach the target."""
    targets = set(state.apartment.furniture_of_type(goal.target))
    out = dict(goal.objects)
    for o, loc in belief.known:
        kind = state.object_types[o]
        if loc in targets and kind in out:
            out[kind] -= 1
    return {k: n for k, n in out.items() if n > 0}


def subgoals(state: State, belief: Belief, goal: Goal, params: HumanParams,
             agent: int = 0) -> list[_Subgoal]:
    """The planner's candidate subgoals with their costs and next actions (empty: wait)."""
    me = state.agents[agent]
    apt = state.apartment
    targets = apt.furniture_of_type(goal.target)
    missing = needs(state, belief, goal)
    if not targets or not missing:
        return []
    held = [o for o in me.holding if missing.get(state.object_types[o], 0) > 0]
    if held and not me.free_hand:  # two objects (a noisy grab): free a hand first
        spare = [o for o in me.holding if o != held[0]][0]
        return _put_down(state, me, spare, params)
    if held:
        obj = held[0]
        return [_Subgoal(_walk_steps(state, me, t, params) + _open_cost(state, t) + 1.0,
                         _approach(state, me, t, put(obj, apt.piece(t)))) for t in targets]
    if me.holding:  # something not needed: put it down on the nearest usable furniture
        return _put_down(state, me, me.holding[0], params)
    out = []
    available: dict[str, int] = {}
    target_set = set(targets)
    others_hold = dict(belief.holders)
    for o, loc in belief.known:
        kind = state.object_types[o]
        if kind not in missing or loc == HELD or loc in target_set or o in others_hold:
            continue
        available[kind] = available.get(kind, 0) + 1
        cost = (_walk_steps(state, me, loc, params) + _open_cost(state, loc) + 1.0
                + _deliver_from(state, loc, targets, params))
        out.append(_Subgoal(cost, _approach(state, me, loc, grab_action(o))))
    if any(available.get(k, 0) < n for k, n in missing.items()):
        key = ("search", agent, targets, belief.seen, belief.visited, params.walk_metres,
               params.search_penalty)  # frozensets cache their hashes
        out += _memo(state, key, lambda: _search(state, belief, me, targets, params))
    return out


def _put_down(state, me, obj, params) -> list[_Subgoal]:
    """Subgoals putting `obj` on any surface or already open container."""
    return [_Subgoal(_walk_steps(state, me, f.id, params) + 1.0,
                     walk_to(f.id) if me.close_to != f.id else put(obj, f))
            for f in state.apartment.furniture if not f.is_container or f.id in state.open]


def _search(state, belief, me, targets, params, everywhere: bool = False) -> list[_Subgoal]:
    apt = state.apartment
    out = []
    target_set = set(targets)
    for r in apt.rooms:
        if r.name not in belief.visited and not everywhere:
            metres = apt.path_length(me.pos, r.center, r.name)
            cost = (metres / params.walk_metres + params.search_penalty
                    + _deliver_from(state, r.name, targets, params) + 1.0)
            out.append(_Subgoal(cost, walk_to_room(r.name)))
    for f in apt.furniture:
        if f.id in target_set or (f.id in belief.seen and not everywhere):
            continue
        if not everywhere and f.room not in belief.visited:
            continue  # reached through its room first
        if everywhere and me.close_to == f.id and not _open_cost(state, f.id):
            continue
        cost = (_walk_steps(state, me, f.id, params) + _open_cost(state, f.id)
                + params.search_penalty + _deliver_from(state, f.id, targets, params) + 1.0)
        then = open_(f.id) if _open_cost(state, f.id) else walk_to(f.id)
        if me.close_to == f.id and then.verb == "walk":
            continue
        out.append(_Subgoal(cost, _approach(state, me, f.id, then)))
    if not out and not everywhere:  # everything looked at, still short: look again anywhere
        return _search(state, belief, me, targets, params, everywhere=True)
    return out


def _continues(action: Action, heading: Action | None) -> bool:
    """The walk under way, or acting on the furniture just reached (not walking off)."""
    return action == heading or action.verb not in ("walk", "wait")


def planner_distribution(state: State, belief: Belief, goal: Goal, params: HumanParams,
                         agent: int = 0) -> dict[Action, float]:
    """The noiseless part: Boltzmann over subgoals, summed per next action."""
    options = subgoals(state, belief, goal, params, agent)
    if not options:
        return {WAIT: 1.0}
    heading = state.agents[agent].heading
    costs = [s.cost - (params.commitment if _continues(s.action, heading) else 0.0)
             for s in options]
    best = min(costs)
    weights = [math.exp((best - c) / params.temperature) for c in costs]
    total = sum(weights)
    out: dict[Action, float] = {}
    for s, w in zip(options, weights):
        out[s.action] = out.get(s.action, 0.0) + w / total
    return out


def action_distribution(state: State, belief: Belief, goal: Goal,
                        params: HumanParams = HumanParams(), agent: int = 0
                        ) -> dict[Action, float]:
    """Exact P(action | state, belief, goal): (1 - eps) planner + eps uniform over legal
    actions. Keys are sorted; probabilities sum to 1. A belief that contradicts the state (a
    counterfactual one) can make the planner propose an action the state forbids: that raises
    AssertionError here, while `action_probability` leaves the proposal's mass unassigned.
    The human's own recorded beliefs never do this."""
    legal = _memo(state, ("legal", agent), lambda: legal_actions(state, agent))
    plan = planner_distribution(state, belief, goal, params, agent)
    eps = params.epsilon
    uniform = eps / len(legal)
    out = {a: uniform for a in legal}
    for a, p in plan.items():
        if a not in out:
            raise AssertionError(f"planner proposed an illegal action {a}")
        out[a] += (1.0 - eps) * p
    return out


def action_probability(state: State, belief: Belief, goal: Goal, action: Action,
                       params: HumanParams = HumanParams(), agent: int = 0) -> float:
    """`action_distribution(...)[action]` (0 for an illegal action) without building the dict
    over every legal action: the likelihood's inner loop."""
    legal = _memo(state, ("legal_set", agent), lambda: frozenset(legal_actions(state, agent)))
    if action not in legal:
        return 0.0
    plan = planner_distribution(state, belief, goal, params, agent)
    return (1.0 - params.epsilon) * plan.get(action, 0.0) + params.epsilon / len(legal)


def sample_action(dist: dict[Action, float], rng: np.random.Generator) -> Action:
    actions = sorted(dist)
    probs = np.array([dist[a] for a in actions])
    return actions[int(rng.choice(len(actions), p=probs / probs.sum()))]
