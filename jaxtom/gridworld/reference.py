"""Plain NumPy/Python reference of the gridworld: BFS, the human policy, the helper's action
values, one environment step and the goal likelihood. Written for clarity, one episode at a
time in float64; the tests use it as an oracle for the JAX code and the benchmark uses it as
the one-episode-at-a-time baseline."""

from __future__ import annotations

import collections
import dataclasses
import math

import numpy as np

from jaxtom.gridworld.types import (
    ACTION_DELTAS, MOVES, NUM_ACTIONS, PICK, PUT, STAY, EnvParams, goal_pairs,
)

INF = 10_000


@dataclasses.dataclass
class RefState:
    walls: np.ndarray  # bool [H, W]
    obj_pos: list  # [(x, y)] * K
    human_pos: tuple
    helper_pos: tuple
    human_holding: int
    helper_holding: int
    human_last_action: int
    helper_stays: int
    goal: tuple  # ordered (object1, object2)
    time: int = 0
    done: bool = False


def from_env_state(state) -> RefState:
    """Copy an unbatched JAX `EnvState` into a reference state."""
    return RefState(
        walls=np.asarray(state.layout.walls, bool),
        obj_pos=[tuple(int(v) for v in p) for p in np.asarray(state.obj_pos)],
        human_pos=tuple(int(v) for v in np.asarray(state.human_pos)),
        helper_pos=tuple(int(v) for v in np.asarray(state.helper_pos)),
        human_holding=int(state.human_holding), helper_holding=int(state.helper_holding),
        human_last_action=int(state.human_last_action), helper_stays=int(state.helper_stays),
        goal=tuple(int(v) for v in np.asarray(state.goal)), time=int(state.time),
        done=bool(state.done))


def neighbour(walls, pos, action):
    """Where `action` takes an agent standing at `pos` (blocked moves stay)."""
    height, width = walls.shape
    dx, dy = ACTION_DELTAS[action]
    x, y = pos[0] + int(dx), pos[1] + int(dy)
    if 0 <= x < width and 0 <= y < height and not walls[y, x]:
        return (x, y)
    return tuple(pos)


def bfs(walls, source) -> np.ndarray:
    """[H, W] shortest path lengths from `source` (INF where unreachable)."""
    dist = np.full(walls.shape, INF, np.int64)
    if walls[source[1], source[0]]:
        return dist
    dist[source[1], source[0]] = 0
    queue = collections.deque([tuple(source)])
    while queue:
        pos = queue.popleft()
        for action in MOVES:
            nxt = neighbour(walls, pos, action)
            if dist[nxt[1], nxt[0]] == INF:
                dist[nxt[1], nxt[0]] = dist[pos[1], pos[0]] + 1
                queue.append(nxt)
    return dist


class Distances:
    """BFS distance fields, computed lazily per source cell (cached)."""

    def __init__(self, walls):
        self.walls = walls
        self._cache: dict = {}

    def __call__(self, a, b) -> int:
        a = tuple(a)
        if a not in self._cache:
            self._cache[a] = bfs(self.walls, a)
        return int(self._cache[a][b[1], b[0]])


def _ground(state: RefState):
    return [k for k in range(len(state.obj_pos)) if k not in (state.human_holding, state.helper_holding)]


def _occupied(state: RefState, pos) -> bool:
    return any(state.obj_pos[k] == tuple(pos) for k in _ground(state))


def _free_adjacent(state: RefState, obj):
    """Free cells (no wall, no ground object) at Manhattan distance 1 of object `obj`."""
    x, y = state.obj_pos[obj]
    height, width = state.walls.shape
    cells = []
    for cx, cy in ((x, y + 1), (x, y - 1), (x - 1, y), (x + 1, y)):
        if 0 <= cx < width and 0 <= cy < height and not state.walls[cy, cx] and not _occupied(state, (cx, cy)):
            cells.append((cx, cy))
    return cells


def _dist_to_adjacent(state, dist, pos, obj) -> int:
    return min([dist(pos, c) for c in _free_adjacent(state, obj)], default=INF)


def _disc(steps, params: EnvParams) -> float:
    return -params.step_cost * (1.0 - params.gamma ** steps) / (1.0 - params.gamma)


def _softmax(values):
    values = np.asarray(values, np.float64)
    e = np.exp(values - values.max())
    return e / e.sum()


def human_policy(state: RefState, goal, params: EnvParams, dist=None) -> np.ndarray:
    """[7] action probabilities of the simulated human pursuing ordered `goal`."""
    dist = dist or Distances(state.walls)
    o1, o2 = goal
    probs = np.zeros(NUM_ACTIONS)
    holding = state.human_holding
    if holding >= 0 and holding != o1:
        pass  # the goal cannot explain carrying another object
    elif holding < 0 and o1 in _ground(state) and state.obj_pos[o1] == state.human_pos:
        probs[PICK] = 1.0
    elif holding == o1 and not _occupied(state, state.human_pos) and (
            abs(state.human_pos[0] - state.obj_pos[o2][0]) + abs(state.human_pos[1] - state.obj_pos[o2][1]) == 1):
        probs[PUT] = 1.0
    elif holding == o1 and state.human_last_action in MOVES:
        probs[STAY] = 1.0
    else:
        q = []
        for action in MOVES:
            nxt = neighbour(state.walls, state.human_pos, action)
            if holding == o1:
                steps = _dist_to_adjacent(state, dist, nxt, o2)
            else:
                steps = dist(nxt, state.obj_pos[o1]) + max(0, dist(state.obj_pos[o1], state.obj_pos[o2]) - 1)
            q.append(params.gamma * _disc(steps, params) - params.step_cost)
        probs[list(MOVES)] = _softmax(np.array(q) / params.human_tau)
    if params.random_prob > 0:
        uniform = np.zeros(NUM_ACTIONS)
        uniform[list(MOVES)] = 0.25
        probs = (1 - params.random_prob) * probs + params.random_prob * uniform
    return probs


def _helper_steps(state: RefState, dist, pos, holding, goal) -> int:
    """Steps the helper still needs under `goal` from `pos` while holding `holding`."""
    o1, o2 = goal
    if state.human_holding == o2:
        return 0
    if holding < 0:
        if o2 not in _ground(state):
            return 0
        return dist(pos, state.obj_pos[o2]) + 2 + max(0, dist(state.obj_pos[o2], state.obj_pos[o1]) - 1)
    if holding == o2:
        return _dist_to_adjacent(state, dist, pos, o1) + 1
    return _helper_steps(state, dist, pos, -1, goal) + 1


def helper_q_values(state: RefState, goals, probs, params: EnvParams, dist=None,
                    avoid=()) -> np.ndarray:
    """[7] Q(a) = sum_i p_i V(a | g_i) with -inf for invalid actions (including picks while
    the human is within `yield_distance` of the helper, and picks of a given-up object in
    `avoid`); goals whose object2 was given up get no weight."""
    dist = dist or Distances(state.walls)
    pos, holding = state.helper_pos, state.helper_holding
    q = np.full(NUM_ACTIONS, -np.inf)
    here = [k for k in _ground(state) if state.obj_pos[k] == pos]
    probs = [0.0 if goal[1] in avoid else p for goal, p in zip(goals, probs)]
    for action in range(NUM_ACTIONS):
        values = []
        for goal in goals:
            o1, o2 = goal
            if action <= 4:
                steps = _helper_steps(state, dist, neighbour(state.walls, pos, action), holding, goal)
            elif action == PICK:
                if (holding >= 0 or not here or dist(state.human_pos, pos) <= params.yield_distance
                        or min(here) in avoid):
                    break
                steps = _helper_steps(state, dist, pos, min(here), goal)
            else:
                if holding < 0 or here:
                    break
                if state.human_holding == o2:
                    steps = 0
                elif holding == o2:
                    adjacent = abs(pos[0] - state.obj_pos[o1][0]) + abs(pos[1] - state.obj_pos[o1][1]) == 1
                    steps = 0 if adjacent else 2 + max(0, dist(pos, state.obj_pos[o1]) - 1)
                else:
                    steps = _helper_steps(state, dist, pos, -1, goal)
            values.append(params.gamma * _disc(steps, params) - params.step_cost)
        else:
            q[action] = float(np.dot(probs, values))
    return q


def helper_policy(state: RefState, goals, probs, params: EnvParams, dist=None,
                  avoid=()) -> np.ndarray:
    q = helper_q_values(state, goals, probs, params, dist, avoid)
    valid = np.isfinite(q)
    out = np.zeros(NUM_ACTIONS)
    out[valid] = _softmax(q[valid] / params.helper_tau)
    return out


def step(state: RefState, human_action: int, helper_action: int, params: EnvParams,
         teleport: int = -1) -> RefState:
    """Deterministic transition: human moves, helper moves (or jumps onto object `teleport`),
    carried objects follow, then pick/put resolve (human first); done when the goal objects
    are on the ground side by side."""
    if state.done:
        return state
    s = dataclasses.replace(state, obj_pos=list(state.obj_pos))
    if human_action <= 4:
        s.human_pos = neighbour(s.walls, s.human_pos, human_action)
    if teleport >= 0:
        s.helper_pos = tuple(state.obj_pos[teleport])
    elif helper_action <= 4:
        s.helper_pos = neighbour(s.walls, s.helper_pos, helper_action)
    if s.human_holding >= 0:
        s.obj_pos[s.human_holding] = s.human_pos
    if s.helper_holding >= 0:
        s.obj_pos[s.helper_holding] = s.helper_pos
    for who, action in (("human", human_action), ("helper", helper_action)):
        pos, holding = getattr(s, f"{who}_pos"), getattr(s, f"{who}_holding")
        here = [k for k in _ground(s) if s.obj_pos[k] == pos]
        if action == PICK and holding < 0 and here:
            setattr(s, f"{who}_holding", min(here))
        elif action == PUT and holding >= 0 and not here:
            setattr(s, f"{who}_holding", -1)
    s.human_last_action = human_action
    s.helper_stays = s.helper_stays + 1 if helper_action == STAY else 0
    s.time += 1
    o1, o2 = s.goal
    ground = _ground(s)
    side_by_side = (o1 in ground and o2 in ground and
                    abs(s.obj_pos[o1][0] - s.obj_pos[o2][0]) + abs(s.obj_pos[o1][1] - s.obj_pos[o2][1]) == 1)
    s.done = side_by_side or s.time >= params.max_steps
    return s


def step_log_likelihoods(states, actions, params: EnvParams) -> np.ndarray:
    """[T, G] floored log P(a_t | g, s_t) for every ordered goal (reference for the JAX one)."""
    goals = goal_pairs(params.num_objects)
    out = np.zeros((len(states), len(goals)))
    floor = math.log(params.likelihood_floor)
    fields: dict = {}  # one BFS cache per wall layout
    for t, (state, action) in enumerate(zip(states, actions)):
        dist = fields.setdefault(state.walls.tobytes(), Distances(state.walls))
        for g, goal in enumerate(goals):
            p = human_policy(state, tuple(goal), params, dist)[action]
            out[t, g] = max(math.log(p), floor) if p > 0 else floor
    return out


def sample_action(rng: np.random.Generator, probs) -> int:
    return int(rng.choice(NUM_ACTIONS, p=probs / probs.sum()))


def yield_rule(state: RefState, params: EnvParams, dist=None):
    """The helper's make-way action while it holds an object, or None: PUT with the human at
    path distance `put_distance` (if no ground object blocks the put), STAY at
    `wait_distance`."""
    if state.helper_holding < 0:
        return None
    dist = dist or Distances(state.walls)
    d = dist(state.helper_pos, state.human_pos)
    if params.put_distance and d == params.put_distance and not _occupied(state, state.helper_pos):
        return PUT
    if params.wait_distance and d == params.wait_distance:
        return STAY
    return None


def _policy_sample(rng, state, goals, probs, params, dist, avoid=()) -> int:
    action = sample_action(rng, helper_policy(state, goals, probs, params, dist, avoid))
    if action == STAY and state.helper_stays >= params.deadlock_stays:
        action = int(rng.choice(MOVES))
    return action


def sample_helper_action(rng: np.random.Generator, state: RefState, goals, probs,
                         params: EnvParams, dist=None) -> int:
    """The memoryless helper: the make-way rule, else the policy with the deadlock breaker (a
    random move after too many stays)."""
    rule = yield_rule(state, params, dist)
    return rule if rule is not None else _policy_sample(rng, state, goals, probs, params, dist)


class Helper:
    """The helper with its memory (see `jaxtom.gridworld.helper`): the belief kept after human
    pauses, the objects it gave up, the argmax streak and the goal the teleport rule commits
    to."""

    def __init__(self, params: EnvParams):
        self.params = params
        self.goals, self.probs = [], []
        self.avoid: set = set()
        self.top_goal, self.top_count, self.fixed_goal = None, 0, None

    def decide(self, state: RefState, goals, probs, refresh=None, dist=None):
        """The deterministic part of a step: updates the memory and returns `(rule, teleport)`,
        the make-way action (or None) and the object to jump onto (or -1)."""
        params = self.params
        if refresh is None:
            refresh = state.time == 0 or state.human_last_action != STAY or params.refresh_on_pause
        if refresh:
            self.goals, self.probs = [tuple(int(v) for v in g) for g in goals], list(probs)
        rule = yield_rule(state, params, dist)
        teleport = -1
        if params.teleport_after and refresh and rule is None and self.fixed_goal is None:
            top = self.goals[int(np.argmax(self.probs))]
            self.top_count = self.top_count + 1 if top == self.top_goal else 1
            self.top_goal = top
            human = state.human_holding
            if self.top_count >= params.teleport_after and human in top:
                other = top[1] if human == top[0] else top[0]
                self.fixed_goal = (human, other)
                if state.helper_holding < 0:
                    teleport = other
        if rule == PUT:
            self.avoid.add(state.helper_holding)
        return rule, teleport

    def belief(self):
        """The goals and weights the policy acts on."""
        if self.fixed_goal is not None:
            return [self.fixed_goal], [1.0]
        return self.goals, self.probs

    def act(self, rng, state: RefState, goals, probs, refresh=None, dist=None):
        """`(action, teleport)` for this step."""
        rule, teleport = self.decide(state, goals, probs, refresh, dist)
        if teleport >= 0:
            return PICK, teleport
        if rule is not None:
            return rule, -1
        goals, probs = self.belief()
        return _policy_sample(rng, state, goals, probs, self.params, dist, self.avoid), -1


def run_episode(rng: np.random.Generator, state: RefState, params: EnvParams,
                helper: str = "oracle") -> list[RefState]:
    """Play one episode to the end with the oracle (true goal) or a stationary helper; returns
    the visited states. One BFS cache serves the whole episode, as walls never change."""
    dist = Distances(state.walls)
    agent = Helper(params)
    states = [state]
    while not state.done:
        human = sample_action(rng, human_policy(state, state.goal, params, dist))
        helper_action, teleport = STAY, -1
        if helper == "oracle":
            helper_action, teleport = agent.act(rng, state, [state.goal], [1.0], dist=dist)
        state = step(state, human, helper_action, params, teleport)
        states.append(state)
    return states
