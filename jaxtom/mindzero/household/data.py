"""Household training data: unlabelled episodes unrolled into timesteps (MindZero appendix C.2).

Episodes come from the simulator (`episodes.generate_episodes`) on the training apartments
(OWAH's 0, 1, 2, 4, 5) and, for evaluation, on the held-out ones (3, 6). A timestep `t` counts
the human actions observed so far: the prompt shows the state in which the latest one,
`a_{t-1}`, was taken and that action as "the human's next action" (Figure 9), and the reward
scores `a_0 .. a_{t-1}`. Only steps after the human's first key action (a grab or a put) are
kept (`after_first_key=True`): this library's choice, not the paper's (it states no such rule),
because before any key action the walk alone says next to nothing about the goal. Nothing about
the goal is attached to a record: the pipeline is label-free by construction (`Episode.goal` is
read only by the evaluation and the held-out monitor).

Observations (`get_observation(name)`: `(episode, t, n) -> str`):
  * `figure`: Figure 9's prompt, rendered by `jaxtom.household.text` (what real LLMs read);
  * `compact`: one short line for the tiny model trained from scratch on a CPU: the targets
    the apartment has, what has been put where, what the human holds and the latest action,
    e.g. `n=3 | has coffeetable fridge kitchentable | done 2 apple fridge | hold salmon |
    last walk fridge`. A function of the observed key actions and states only.

Warm-up teachers (label-free stand-ins for the paper's samples of a bigger model, which teach
a from-scratch model the format): `approached` starts from what the human has grabbed
(delivered plus held, with those counts), where it put them, or the target it is carrying
something towards, and adds alternatives in a fixed order (every count +1, one more type of
the task, every count +2), each with at least 0.1 of the mass; `random` draws O-WAH random
goals (`helper_beliefs.random_goal`). Neither reads the true goal. The order is fixed
because a teacher that perturbs at random teaches a from-scratch model to repeat its first
hypothesis (the mode of every slot), and SSRL then fills the other slots with junk at p = 0,
where the reward does not reach their content. SSRL has to learn from the reward which
completions deserve the mass (the objects still to come, equal counts, the task that fits).

`goal_support(apartment)`: the finite goal set the task generator can draw in an apartment
(about 660 goals), the hypothesis space of the exact posterior the evaluation prints.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
from collections import Counter
from typing import Callable, Sequence

import grain
import numpy as np

from jaxtom.household import catalog, text
from jaxtom.household.apartments import apartments
from jaxtom.household.episodes import generate_episodes
from jaxtom.household.goals import Goal
from jaxtom.household.helper_beliefs import random_goal
from jaxtom.household.human import HumanParams
from jaxtom.mindzero.household.particles import format_particles

TEACHERS = ("approached", "random")


# ---- episodes ------------------------------------------------------------------------------
def human_params(config):
    return HumanParams(full_observation=config.mindzero.household.observability == "full")


def make_episodes(config, split: str) -> list:
    """The run's `train` or `test` episodes (deterministic in `trainer.seed`)."""
    d, h = config.mindzero.data, config.mindzero.household
    if split == "train":
        apts, n, offset = h.train_apartments, d.train_episodes, 0
    elif split == "test":
        apts, n, offset = h.test_apartments, d.eval_episodes, 7919
    else:
        raise ValueError(f"split must be 'train' or 'test', got {split!r}")
    seed = config.trainer.seed + h.seed_offset
    return generate_episodes(apartments(apts), n, seed * 104729 + offset,
                             params=human_params(config), max_steps=d.max_steps)


def first_step(episode, after_first_key: bool = True) -> int:
    """The first timestep kept: one past the first key action (or 1)."""
    keys = episode.key_steps
    if after_first_key and keys:
        return keys[0] + 1
    return 1


def timestep_records(episodes: Sequence, stride: int = 1,
                     after_first_key: bool = True) -> list[tuple[int, int]]:
    """All (episode, t) with t from `first_step` to the episode's length (every stride-th)."""
    return [(e, t) for e, ep in enumerate(episodes)
            for t in range(first_step(ep, after_first_key), ep.length + 1, stride)]


# ---- what the observer has seen at t -------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class Evidence:
    """The observable summary at timestep t (actions a_0..a_{t-1} seen)."""
    put: tuple[tuple[str, str, int], ...]  # (object type, target furniture type, count)
    held: tuple[str, ...]  # object types in the human's hands after a_{t-1}
    last: str  # a_{t-1}, compact
    heading: str  # furniture type the human walks to (or "")
    targets: tuple[str, ...]  # goal targets the apartment has


def _furniture_type(state, fid: int) -> str:
    return state.apartment.piece(fid).type


def action_words(state, action) -> str:
    """`a` as a few words, e.g. `walk fridge`, `grab apple`, `put apple fridge`."""
    if action.verb == "walk":
        return f"walk {action.room}" if action.room else \
            f"walk {_furniture_type(state, action.furniture)}"
    if action.verb in ("open", "close"):
        return f"{action.verb} {_furniture_type(state, action.furniture)}"
    if action.verb == "grab":
        return f"grab {state.object_types[action.obj]}"
    if action.verb in ("putin", "putback"):
        return f"put {state.object_types[action.obj]} {_furniture_type(state, action.furniture)}"
    return action.verb


@functools.lru_cache(maxsize=200_000)
def _evidence(episode, t: int) -> Evidence:
    if not 1 <= t <= episode.length:
        raise ValueError(f"timestep {t} outside 1..{episode.length}")
    put: Counter = Counter()
    for s in range(t):
        a = episode.actions[s]
        if a.verb in ("putin", "putback"):
            state = episode.states[s]
            put[(state.object_types[a.obj], _furniture_type(state, a.furniture))] += 1
    after = episode.states[t]
    held = tuple(sorted(after.object_types[o] for o in after.agents[0].holding))
    last = episode.actions[t - 1]
    heading = ""
    if last.verb == "walk" and not last.room:
        heading = _furniture_type(episode.states[t - 1], last.furniture)
    apt = episode.apartment
    targets = tuple(x for x in catalog.TARGETS if apt.has(x))
    return Evidence(tuple((k, f, c) for (k, f), c in sorted(put.items())), held,
                    action_words(episode.states[t - 1], last), heading, targets)


def evidence(episode, t: int) -> Evidence:
    return _evidence(episode, t)


def compact_observation(episode, t: int, num_particles: int) -> str:
    ev = evidence(episode, t)
    done = ", ".join(f"{c} {k} {f}" for k, f, c in ev.put) or "nothing"
    hold = " ".join(ev.held) or "nothing"
    return (f"n={num_particles} | has {' '.join(ev.targets)} | done {done} | hold {hold} | "
            f"last {ev.last}")


FIGURE9_INTRO = (
    "Human has been working on a task of moving some objects to a target location. The task "
    "type can only be one of the following: setting up a table, putting something in the "
    "dishwasher, putting something in the fridge, preparing food, or watching TV.\n\n"
    "Your are a helpful assistant. In order to help human, please propose multiple hypotheses "
    "of [human's overall goal] (including both finished and potential future subgoals), base "
    "on the following information:")
FIGURE9_HINTS = (
    "Hints:\n- The task type is constant and the target location is unique, i.e., human will "
    "be consistently doing the same task (setting up a table, putting something in the "
    "dishwasher, putting something in the fridge, preparing food, or watching TV) and put all "
    "objects to the same location.\n- Please propose diverse goals in both object type and "
    "count.")


def particle_schema() -> dict:
    """Figure 9's JSON schema of a particle set."""
    obj = {"properties": {"type": {"enum": list(catalog.GOAL_OBJECT_TYPES), "title": "Type",
                                   "type": "string"},
                          "count": {"minimum": 1, "title": "Count", "type": "integer"}},
           "required": ["type", "count"], "title": "Object", "type": "object"}
    target = {"properties": {"type": {"enum": list(catalog.TARGETS), "title": "Type",
                                      "type": "string"}},
              "required": ["type"], "title": "Target", "type": "object"}
    particle = {"properties": {
        "task_name": {"enum": list(catalog.TASKS), "title": "Task Name", "type": "string"},
        "objects": {"items": {"$ref": "#/$defs/Object"}, "minItems": 1, "title": "Objects",
                    "type": "array"},
        "target": {"$ref": "#/$defs/Target"},
        "p": {"description": "Probability of the goal proposal", "maximum": 1, "minimum": 0,
              "title": "P", "type": "number"}},
        "required": ["task_name", "objects", "target", "p"], "title": "GoalParticle",
        "type": "object"}
    return {"$defs": {"GoalParticle": particle, "Object": obj, "Target": target},
            "properties": {"particles": {"items": {"$ref": "#/$defs/GoalParticle"},
                                         "title": "Particles", "type": "array"}},
            "required": ["particles"], "title": "GoalParticles", "type": "object"}


def figure_observation(episode, t: int, num_particles: int) -> str:
    """Figure 9's prompt at timestep t (the state where a_{t-1} was taken)."""

    if not 1 <= t <= episode.length:
        raise ValueError(f"timestep {t} outside 1..{episode.length}")
    block = text.observation_text(episode, t - 1)
    goal = "[human's overall goal] (including both finished and potential future subgoals)"
    return (f"{FIGURE9_INTRO}\n\n{block}\n\n{FIGURE9_HINTS}\n\nOutput Requirements:\n"
            f"Please provide a probability distribution over n={num_particles} hypotheses of "
            f"{goal}.\n\nYour response should include the probability distribution formatted "
            f"according to this JSON schema: {json.dumps(particle_schema())}\n\n"
            "Please output the minified JSON.")


OBSERVATIONS: dict[str, Callable[..., str]] = {"compact": compact_observation,
                                               "figure": figure_observation}


def get_observation(name: str) -> Callable[..., str]:
    if name not in OBSERVATIONS:
        raise ValueError(f"unknown household observation {name!r}; expected one of "
                         f"{sorted(OBSERVATIONS)}")
    return OBSERVATIONS[name]


# Words of the compact observation and the particles that become one token each.
COMPACT_WORDS = tuple(sorted(set(catalog.OBJECT_TYPES + catalog.FURNITURE + catalog.TASKS
                                 + catalog.ROOMS)))


# ---- the generator's goal space ------------------------------------------------------------
@functools.lru_cache(maxsize=None)
def _support(targets: tuple[str, ...]) -> tuple[Goal, ...]:
    out: list[Goal] = []
    for task in catalog.MINDZERO_TASKS:
        task_targets = [x for x in catalog.TASK_TARGETS[task] if x in targets]
        kinds = catalog.TASK_OBJECTS[task]
        for target in task_targets:
            if task in ("setup_table", "prepare_food"):
                fixed = ("plate", "cutleryfork") if task == "setup_table" else ("salmon", "apple")
                choice = (("wineglass", "waterglass") if task == "setup_table"
                          else ("cupcake", "pudding"))
                for extra in choice:
                    for n in (1, 2, 3):
                        out.append(Goal.make(task, {k: n for k in fixed + (extra,)}, target))
            else:
                for total in range(3, 8):
                    for counts in itertools.product(range(total + 1), repeat=len(kinds)):
                        if sum(counts) == total:
                            out.append(Goal.make(task, {k: c for k, c in zip(kinds, counts)
                                                        if c}, target))
    return tuple(out)


def goal_support(apartment) -> tuple[Goal, ...]:
    """Every goal `tasks.generate_task` can draw in `apartment` for MindZero's four tasks."""
    return _support(tuple(x for x in catalog.TARGETS if apartment.has(x)))


def support_log_prior(goals: Sequence[Goal]) -> np.ndarray:
    """The generator's shape as a prior on the support: tasks uniform, goals uniform within
    their task."""
    per_task = Counter(g.task_name for g in goals)
    return np.array([-np.log(len(per_task)) - np.log(per_task[g.task_name]) for g in goals])


# ---- warm-up teachers ----------------------------------------------------------------------
def _tasks_for(target: str, kinds) -> list[str]:
    fits = [t for t in catalog.MINDZERO_TASKS if target in catalog.TASK_TARGETS[t]]
    both = [t for t in fits if any(k in catalog.TASK_OBJECTS[t] for k in kinds)]
    return both or fits or list(catalog.MINDZERO_TASKS)


def observed_goal(ev: Evidence, rng: np.random.Generator) -> Goal:
    """The goal read off the key actions: the grabbed types with their counts, the target
    they went to (else the target the human carries them towards, else a random one the
    apartment has), a task that fits (random among those that do)."""
    counts = Counter()
    for k, _, c in ev.put:
        counts[k] += c
    for k in ev.held:
        counts[k] += 1
    counts = Counter({k: c for k, c in counts.items() if k in catalog.GOAL_OBJECT_TYPES})
    if not counts:
        counts[catalog.GOAL_OBJECT_TYPES[int(rng.integers(len(catalog.GOAL_OBJECT_TYPES)))]] = 1
    puts = Counter()
    for _, f, c in ev.put:
        if f in catalog.TARGETS:
            puts[f] += c
    targets = ev.targets or catalog.TARGETS
    if puts:
        target = puts.most_common(1)[0][0]
    elif ev.held and ev.heading in targets:
        target = ev.heading
    else:
        target = targets[int(rng.integers(len(targets)))]
    tasks = _tasks_for(target, counts)
    return Goal.make(tasks[int(rng.integers(len(tasks)))], dict(counts), target)


def _perturb(goal: Goal, ev: Evidence, rng: np.random.Generator) -> Goal:
    counts = dict(goal.objects)
    move = int(rng.integers(3))
    if move == 0:  # one more of a listed type
        kind = sorted(counts)[int(rng.integers(len(counts)))]
        counts[kind] += 1
        return Goal.make(goal.task_name, counts, goal.target)
    if move == 1:  # another target the apartment has
        targets = [x for x in (ev.targets or catalog.TARGETS) if x != goal.target]
        if targets:
            target = targets[int(rng.integers(len(targets)))]
            tasks = _tasks_for(target, counts)
            return Goal.make(tasks[int(rng.integers(len(tasks)))], counts, target)
    kinds = [k for k in catalog.TASK_OBJECTS[goal.task_name] if k not in counts]
    if kinds:  # one more type of the task
        counts[kinds[int(rng.integers(len(kinds)))]] = max(counts.values())
    else:
        kind = sorted(counts)[int(rng.integers(len(counts)))]
        counts[kind] += 1
    return Goal.make(goal.task_name, counts, goal.target)


def _variants(goal: Goal) -> list[Goal]:
    """Evidence-consistent alternatives to the observed goal, in a fixed order: more of what
    has been seen (every count +1), one more type of the task at the largest count, every
    count +2."""
    counts = dict(goal.objects)
    out = [Goal.make(goal.task_name, {k: c + 1 for k, c in counts.items()}, goal.target)]
    kinds = [k for k in catalog.TASK_OBJECTS[goal.task_name] if k not in counts]
    if kinds:
        out.append(Goal.make(goal.task_name, {**counts, kinds[0]: max(counts.values())},
                             goal.target))
    out.append(Goal.make(goal.task_name, {k: c + 2 for k, c in counts.items()}, goal.target))
    return out


def teacher_goals(episode, t: int, num_particles: int, rng: np.random.Generator,
                  teacher: str = "approached") -> list[Goal]:
    """`num_particles` distinct label-free hypotheses at (episode, t): for `approached` the
    observed goal, its `_variants`, then random perturbations if still short."""
    if teacher not in TEACHERS:
        raise ValueError(f"unknown warm-up teacher {teacher!r}; expected one of {TEACHERS}")
    ev = evidence(episode, t)
    goals: list[Goal] = []
    if teacher == "approached":
        base = observed_goal(ev, rng)
        goals.append(base)
        for g in _variants(base):
            if len(goals) < num_particles and g not in goals:
                goals.append(g)
        for _ in range(20 * num_particles):
            if len(goals) == num_particles:
                break
            g = _perturb(goals[int(rng.integers(len(goals)))], ev, rng)
            if g not in goals:
                goals.append(g)
    while len(goals) < num_particles:
        g = random_goal(rng)
        if g not in goals:
            goals.append(g)
    return goals


def teacher_probs(num_particles: int, rng: np.random.Generator, decimals: int = 1) -> np.ndarray:
    """Random probabilities rounded to `decimals`, summing to 1 (the first one largest), each
    at least one unit of the last decimal: a hypothesis at p = 0 is one the reward ignores."""
    units = 10 ** decimals
    spare = units - num_particles  # units left after one for each hypothesis
    if spare < 0:
        raise ValueError(f"{num_particles} hypotheses cannot each get 1/{units} of the mass")
    share = np.sort(rng.dirichlet(np.ones(num_particles)))[::-1] * spare
    whole = np.floor(share).astype(int)
    rest = np.argsort(-(share - whole), kind="stable")[:spare - whole.sum()]
    whole[rest] += 1  # largest remainders: the units sum exactly
    return np.round(np.sort(1 + whole)[::-1] / units, decimals)


def warmup_target(episode, t: int, num_particles: int, rng: np.random.Generator,
                  teacher: str = "approached") -> str:
    """A well-formed Figure 9 completion with the teacher's hypotheses."""
    goals = teacher_goals(episode, t, num_particles, rng, teacher)
    return format_particles(goals, teacher_probs(num_particles, rng), decimals=1)


# ---- grain pipeline ------------------------------------------------------------------------
def timestep_dataset(episodes: Sequence, *, batch_size: int, seed: int,
                     observation: str = "compact", num_particles: int = 3,
                     epochs: int | None = None, stride: int = 1, after_first_key: bool = True):
    """A grain MapDataset of batches `{"episode": [B], "t": [B], "prompt": [B] str}`
    (shuffled per epoch, repeated `epochs` times or forever, remainder dropped)."""
    render = get_observation(observation)
    records = timestep_records(episodes, stride, after_first_key)
    if len(records) < batch_size:
        raise ValueError(f"{len(records)} timesteps cannot fill a batch of {batch_size}")

    def to_example(record):
        e, t = record
        return {"episode": np.int32(e), "t": np.int32(t),
                "prompt": render(episodes[e], t, num_particles)}

    ds = grain.MapDataset.source(records).shuffle(seed=seed).repeat(epochs)
    return ds.map(to_example).batch(batch_size, drop_remainder=True)
