"""The task sets of a CToM run: generated packing tasks (training and held-out, from the
run's seed) or the paper's public tasks of a domain."""

from __future__ import annotations

from jaxtom.ctom.config import CToMSettings
from jaxtom.ctom.data import load_tasks
from jaxtom.ctom.packing import make_tasks


def packing_tasks(settings: CToMSettings, seed: int):
    """(training, held-out) packing tasks of a run: generated from its seed."""
    return make_tasks(seed, settings.num_tasks or 256, settings.eval_tasks or 64)


def training_tasks(settings: CToMSettings, seed: int = 0):
    if settings.domain == "packing":
        return packing_tasks(settings, seed)[0]
    tasks = load_tasks(settings.domain,
                       None if settings.tasks == "builtin" else settings.tasks)
    return tasks[:settings.num_tasks] if settings.num_tasks else tasks


def evaluation_tasks(settings: CToMSettings, seed: int = 0):
    """What `jaxtom eval` scores: packing's held-out tasks; else the first `eval_tasks`
    (or `num_tasks`) of the task set."""
    if settings.domain == "packing":
        return packing_tasks(settings, seed)[1]
    tasks = load_tasks(settings.domain, None if settings.tasks == "builtin" else settings.tasks)
    return tasks[:settings.eval_tasks or settings.num_tasks or len(tasks)]
