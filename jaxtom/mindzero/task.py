"""What a MindZero task is, and the registry `mindzero.data.task` names one from.

A task is its data, tokenizer, policy and rollouts (`prepare`, returning `Prepared`) and its
held-out table (`evaluate`). The one driver (`jaxtom.mindzero.driver.train`) runs every task
through the same phases; `jaxtom train`, `jaxtom eval` and `jaxtom mindzero run` find the
task here by name. A task module registers itself once (`register(Task(...))` at import);
`jaxtom.mindzero.tasks` imports the built-in ones. This module imports no task.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable

from jaxtom.config import ConfigError


@dataclasses.dataclass
class Prepared:
    """What a task hands the driver once its data, tokenizer and policy exist."""
    model: Any
    codec: Any
    row_len: Callable[[int], int]  # completion budget (tokens) -> the task's packed row length
    monitor: Callable  # config -> the held-out (or validation) eval hook (step, model)
    warmup_tasks: list
    warmup_rollout: Callable  # (config, the warm-up's TrainerConfig) -> its teacher rollout
    ssrl_tasks: list
    ssrl_rollout: Callable  # (config, the model SSRL starts from) -> the SSRL rollout
    teacher_budget: int = 0  # the warm-up targets' longest completion (0: max_new_tokens)
    rebuild: Callable | None = None  # config -> fresh model for a retried warm-up; None:
    #                                  the task's warm-up is not checked (QA)
    keep_best: bool = False  # keep the model of the best monitor score (validation episodes)
    result: dict = dataclasses.field(default_factory=dict)  # returned beside run_dir/state
    timings: dict = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Task:
    """A registered MindZero task.

    `prepare(config, run_dir, mesh) -> Prepared` builds what the driver trains (the warm-up
    teacher included); `evaluate(config, checkpoint, *, test=None, train=None) -> dict`
    writes and returns the held-out results of a run's checkpoint (`test` / `train`: the
    episodes `prepare` returned in `Prepared.result`, so `mindzero run` does not regenerate
    them). `section` is the type of `config.mindzero` the task reads (the gridworld's or
    the household's section); `validate(config)` raises a `ConfigError` for settings the task
    cannot run with (the section checks the rest)."""
    name: str
    prepare: Callable[..., Prepared]
    evaluate: Callable[..., dict]
    section: type
    about: str = ""
    validate: Callable[[Any], None] | None = None


_TASKS: dict[str, Task] = {}


def register(task: Task) -> Task:
    """Adds `task` under its name; a second task of the same name is a programming error."""
    if task.name in _TASKS and _TASKS[task.name] is not task:
        raise ValueError(f"a MindZero task named {task.name!r} is already registered")
    _TASKS[task.name] = task
    return task


def names() -> list[str]:
    return sorted(_TASKS)


def get(config) -> Task:
    """The registered task `config.mindzero.data.task` names, checked against `config`; a
    `ConfigError` lists the registered ones (or names the section or setting the task
    needs)."""
    name = config.mindzero.data.task
    if name not in _TASKS:
        raise ConfigError("mindzero.data.task", f"a registered task: {names()}", name)
    task = _TASKS[name]
    if type(config.mindzero) is not task.section:
        raise ConfigError("mindzero.data.task", f"a task of the config's section "
                          f"({type(config.mindzero).__name__}), not {name!r} (it reads a "
                          f"{task.section.__name__})", name)
    if task.validate is not None:
        task.validate(config)
    return task


def run_dir_of(checkpoint: str | Path) -> Path:
    """The run directory of a checkpoint written by the driver (`run_dir/checkpoint`)."""
    return Path(checkpoint).parent
