"""Recorded human-only episodes: a task, the human's actions, and every state and belief.

Public API
- `Episode`: the `Task` (apartment, goal, placements, start rooms), the human parameters, the
  actions, `states` (T + 1: before each action and the final one) and `beliefs` (T + 1, the
  human's belief in each state, after looking), and `seed`.
  Properties: `goal`, `apartment`, `human_room`, `length`, `done`, `key_steps` (indices of
  grabs and puts).
- `run_human(task, params, seed, max_steps)`: simulate until the goal is done or the budget
  runs out (returns the episode either way; check `episode.done`).
- `generate_episodes(apartments, n, seed, tasks=MINDZERO_TASKS, params, max_steps=200)`:
  n episodes cycling over tasks and apartments in a fixed order (tasks an apartment cannot
  host are skipped for it). Each episode's seed is derived from (seed, index, retry); an
  episode whose human fails to finish within `max_steps` is regenerated with the next retry
  number (a new scene and new noise), up to `max_retries`, and the number of retries is
  counted in `Episode.retries`. Same arguments, same episodes.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from jaxtom.household import catalog
from jaxtom.household.apartments import Apartment
from jaxtom.household.goals import Goal
from jaxtom.household.human import (
    Belief, HumanParams, action_distribution, initial_belief, sample_action, update_belief,
)
from jaxtom.household.tasks import Task, available_tasks, generate_task, task_state
from jaxtom.household.world import Action, State, is_done, observe, step

MAX_STEPS = 200  # O-WAH's step budget
MAX_RETRIES = 20


@dataclasses.dataclass(frozen=True)
class Episode:
    task: Task
    params: HumanParams
    actions: tuple[Action, ...]
    states: tuple[State, ...]
    beliefs: tuple[Belief, ...]
    seed: int
    retries: int = 0

    @property
    def goal(self) -> Goal:
        return self.task.goal

    @property
    def apartment(self) -> Apartment:
        return self.task.apartment

    @property
    def human_room(self) -> str:
        """The room the human starts in (at its centre)."""
        return self.task.human_room

    @property
    def length(self) -> int:
        return len(self.actions)

    @property
    def done(self) -> bool:
        return is_done(self.states[-1], self.goal)

    @property
    def key_steps(self) -> tuple[int, ...]:
        """Steps whose action is a grab or a put."""
        return tuple(t for t, a in enumerate(self.actions) if a.is_key)


def run_human(task: Task, params: HumanParams = HumanParams(), seed: int = 0,
              max_steps: int = MAX_STEPS) -> Episode:
    """The human alone on `task` until done or `max_steps` actions."""
    rng = np.random.default_rng([seed, 7919])
    state = task_state(task)
    belief = initial_belief(state, 0, params.full_observation)
    states, beliefs, actions = [state], [belief], []
    while len(actions) < max_steps and not is_done(state, task.goal):
        action = sample_action(action_distribution(state, belief, task.goal, params), rng)
        state = step(state, 0, action, params.walk_metres)
        belief = update_belief(belief, observe(state, 0, params.full_observation))
        actions.append(action)
        states.append(state)
        beliefs.append(belief)
    return Episode(task, params, tuple(actions), tuple(states), tuple(beliefs), seed)


def episode_plan(apartments, n: int, tasks=catalog.MINDZERO_TASKS):
    """The (apartment, task) of each of n episodes: tasks cycle fastest, apartments next,
    skipping pairs an apartment cannot host."""
    pairs = [(apt, t) for apt in apartments for t in tasks if t in available_tasks(apt, tasks)]
    if not pairs:
        raise ValueError("no apartment can host any of the tasks " + ", ".join(tasks))
    by_task = [[p for p in pairs if p[1] == t] for t in tasks]
    by_task = [group for group in by_task if group]
    out = []
    for i in range(n):
        group = by_task[i % len(by_task)]
        out.append(group[(i // len(by_task)) % len(group)])
    return out


def generate_episodes(apartments, n: int, seed: int, tasks=catalog.MINDZERO_TASKS,
                      params: HumanParams = HumanParams(), max_steps: int = MAX_STEPS,
                      max_retries: int = MAX_RETRIES) -> list[Episode]:
    """n finished episodes (module docstring); RuntimeError if one cannot finish in
    `max_retries` tries."""
    out = []
    for index, (apt, task_name) in enumerate(episode_plan(apartments, n, tasks)):
        for retry in range(max_retries):
            episode_seed = int(np.random.default_rng([seed, index, retry]).integers(2**31))
            task = generate_task(apt, task_name, episode_seed)
            episode = run_human(task, params, episode_seed, max_steps)
            if episode.done:
                out.append(dataclasses.replace(episode, retries=retry))
                break
        else:
            raise RuntimeError(f"episode {index} ({task_name} in {apt.name}) did not finish "
                               f"within {max_steps} steps in {max_retries} tries")
    return out
