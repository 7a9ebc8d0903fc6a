"""The O-WAH task generator (notes section 1): a goal plus a scene that makes it solvable.

Public API
- `Task`: the apartment, the `Goal`, object placements (type, furniture id), the human's and
  the helper's start rooms (distinct), and the seed.
- `available_tasks(apartment)`: the tasks whose targets the apartment has.
- `generate_task(apartment, task_name, seed)`: deterministic from the seed.
  setup_table: plate, cutleryfork and one of wineglass/waterglass, the same n = 1..3 each, on
  a kitchentable or coffeetable; prepare_food: salmon, apple and one of cupcake/pudding, same
  n, on a kitchentable/coffeetable or in the stove; put_fridge / put_dishwasher: k = 1..4 types
  drawn with replacement from the task's types, N = 3..7 objects spread over them; watch_tv:
  chips, remotecontrol, condimentbottle, 1 each, on the coffeetable. setup/prepare/watch_tv
  place randint(n, 5) instances of each goal type (extras make the choice of instance matter),
  put_* exactly the needed number. Goal-type objects never start on an instance of the target
  type. Then 15-25 clutter objects of the other types go on/in plausible furniture
  (`START_LOCATIONS`, falling back to any furniture the apartment has).
- `task_state(task, with_helper=False)`: the initial `world.State` (agent 0 human, agent 1
  helper when asked).
- `scripted_solution(task)`: a full-knowledge plan that completes the task (solvability).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jaxtom.household import catalog, world
from jaxtom.household.apartments import Apartment
from jaxtom.household.goals import Goal
from jaxtom.household.world import State, initial_state

# Where each object type plausibly starts (in the spirit of O-WAH's object_info_final.json).
START_LOCATIONS = {
    "apple": ("fridge", "kitchentable", "coffeetable", "kitchencabinet"),
    "book": ("desk", "coffeetable", "sofa", "cabinet", "bathroomcabinet"),
    "chips": ("kitchencabinet", "coffeetable", "desk", "cabinet"),
    "condimentbottle": ("kitchencabinet", "kitchentable", "fridge", "cabinet"),
    "cupcake": ("fridge", "kitchentable", "coffeetable", "cabinet", "kitchencabinet"),
    "cutleryfork": ("kitchencabinet", "kitchentable", "dishwasher", "cabinet", "desk"),
    "dishbowl": ("kitchencabinet", "dishwasher", "kitchentable", "cabinet"),
    "plate": ("kitchencabinet", "kitchentable", "dishwasher", "coffeetable", "desk", "cabinet"),
    "pudding": ("fridge", "kitchentable", "kitchencabinet", "coffeetable"),
    "remotecontrol": ("coffeetable", "sofa", "desk", "cabinet"),
    "salmon": ("fridge", "microwave", "stove", "kitchentable"),
    "waterglass": ("kitchencabinet", "kitchentable", "coffeetable", "desk", "dishwasher",
                   "cabinet", "bathroomcabinet"),
    "wine": ("fridge", "kitchencabinet", "kitchentable", "cabinet"),
    "wineglass": ("kitchencabinet", "kitchentable", "coffeetable", "dishwasher", "cabinet"),
}
CLUTTER_RANGE = (15, 25)
MAX_EXTRA = 5  # setup/prepare/watch_tv place randint(n, MAX_EXTRA) instances of each type


@dataclasses.dataclass(frozen=True)
class Task:
    apartment: Apartment
    goal: Goal
    placements: tuple[tuple[str, int], ...]
    human_room: str
    helper_room: str
    seed: int


def available_tasks(apt: Apartment, tasks=catalog.MINDZERO_TASKS) -> tuple[str, ...]:
    """Tasks with at least one of their targets present in the apartment."""
    return tuple(t for t in tasks if any(apt.has(x) for x in catalog.TASK_TARGETS[t]))


def _places(apt: Apartment, kind: str, banned: set[int]) -> list[int]:
    ok = [f.id for f in apt.furniture if f.type in START_LOCATIONS[kind] and f.id not in banned]
    return ok or [f.id for f in apt.furniture if f.id not in banned]


def _goal(apt: Apartment, task_name: str, rng: np.random.Generator):
    """(goal, instances to place per goal type)."""
    targets = [x for x in catalog.TASK_TARGETS[task_name] if apt.has(x)]
    if not targets:
        raise ValueError(f"{apt.name} has none of {task_name}'s targets "
                         f"{catalog.TASK_TARGETS[task_name]}")
    target = targets[int(rng.integers(len(targets)))]
    if task_name in ("setup_table", "prepare_food"):
        fixed = ("plate", "cutleryfork") if task_name == "setup_table" else ("salmon", "apple")
        choice = ("wineglass", "waterglass") if task_name == "setup_table" else ("cupcake",
                                                                                  "pudding")
        kinds = fixed + (choice[int(rng.integers(2))],)
        n = int(rng.integers(1, 4))
        counts = {k: n for k in kinds}
        placed = {k: int(rng.integers(n, MAX_EXTRA + 1)) for k in kinds}
    elif task_name == "watch_tv":
        counts = {k: 1 for k in catalog.TASK_OBJECTS["watch_tv"]}
        placed = {k: int(rng.integers(1, 4)) for k in counts}
    else:
        pool = catalog.TASK_OBJECTS[task_name]
        classes = sorted({pool[int(i)] for i in rng.integers(len(pool), size=rng.integers(1, 5))})
        total = int(rng.integers(3, 8))
        counts = {}
        for i in rng.integers(len(classes), size=total):
            counts[classes[int(i)]] = counts.get(classes[int(i)], 0) + 1
        placed = dict(counts)
    return Goal.make(task_name, counts, target), placed


def generate_task(apt: Apartment, task_name: str, seed: int,
                  clutter_range=CLUTTER_RANGE) -> Task:
    """A task and its scene, deterministic from `seed` (module docstring)."""
    catalog.check_task(task_name)
    rng = np.random.default_rng([seed, catalog.TASKS.index(task_name)])
    goal, placed = _goal(apt, task_name, rng)
    target_ids = set(apt.furniture_of_type(goal.target))
    placements = []
    for kind, number in sorted(placed.items()):
        spots = _places(apt, kind, target_ids)
        placements += [(kind, spots[int(i)]) for i in rng.integers(len(spots), size=number)]
    others = [k for k in catalog.OBJECT_TYPES if k not in placed]
    for _ in range(int(rng.integers(clutter_range[0], clutter_range[1] + 1))):
        kind = others[int(rng.integers(len(others)))]
        spots = _places(apt, kind, set())
        placements.append((kind, spots[int(rng.integers(len(spots)))]))
    rooms = list(apt.room_names)
    human, helper = rng.choice(len(rooms), size=2, replace=False)
    return Task(apt, goal, tuple(placements), rooms[int(human)], rooms[int(helper)], seed)


def task_state(task: Task, with_helper: bool = False) -> State:
    """The task's initial state: the human (agent 0) and optionally the helper (agent 1)."""
    rooms = (task.human_room, task.helper_room) if with_helper else (task.human_room,)
    return initial_state(task.apartment, task.placements, rooms)


def scripted_solution(task: Task, walk_metres: float | None = None) -> list:
    """A plan that completes the task with full knowledge, independent of the human planner
    (the solvability check): per needed object, walk to it, open its container, grab it, walk
    to the first target instance, open it, put it. Raises ValueError if the scene lacks
    enough goal objects."""
    walk = world.WALK_METRES if walk_metres is None else walk_metres
    state = task_state(task)
    apt = task.apartment
    target = apt.piece(apt.furniture_of_type(task.goal.target)[0])
    actions = []

    def act(action):
        nonlocal state
        state = world.step(state, 0, action, walk)
        actions.append(action)

    def go_and_open(piece):
        while state.agents[0].close_to != piece.id:
            act(world.walk_to(piece.id))
        if piece.is_container and piece.id not in state.open:
            act(world.open_(piece.id))

    for kind, count in task.goal.objects:
        todo = count - world.count_at_target(state, task.goal, kind)
        spares = [o for o, (t, loc) in enumerate(zip(state.object_types, state.object_loc))
                  if t == kind and loc != world.HELD and apt.piece(loc).type != target.type]
        if len(spares) < todo:
            raise ValueError(f"{task.goal.render()}: only {len(spares)} {kind} to move, "
                             f"{todo} needed")
        for obj in spares[:todo]:
            go_and_open(apt.piece(state.object_loc[obj]))
            act(world.grab(obj))
            go_and_open(target)
            act(world.put(obj, target))
    return actions
