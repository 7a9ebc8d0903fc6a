"""The one MindZero driver: every task runs the same phases on the one trainer.

A task (goal particles over text or image observations, question answering in either domain,
household goal particles) is a `prepare(config, run_dir, mesh) -> Prepared` function: its
data, tokenizer and policy, how long its rows are, and builders of its held-out monitor, its
warm-up teacher and its SSRL rollout (built against the run's final config, whose row length
the driver sets from the task's). `train` owns everything else, in the same order for every task:
config.json, the mesh, the row length, the format warm-up (checked and retried where the
task checks one), the kept model (validation episodes), SSRL, checkpoints and timings. Each
phase checkpoints under its own folder of the run directory, so rerunning the same command
on a run directory continues where it stopped.
"""

from __future__ import annotations

import dataclasses
import time
from pathlib import Path
from typing import Any, Callable

import jax

from jaxtom import storage
from jaxtom.mindzero.config import is_image
from jaxtom.models.orbax_io import save_model
from jaxtom.mindzero.monitor import BestModel
from jaxtom.mindzero.warmup import checked_warm_up, warmup_trainer_config
from jaxtom.rl.trainer import Trainer


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


def task_prepare(config) -> Callable:
    """The `prepare` function of the config's task (`mindzero.data.task` / `.observation`)."""
    d = config.mindzero.data
    if d.task == "household":
        from jaxtom.mindzero.household.train import prepare
    elif d.task in ("qa", "household_qa"):
        from jaxtom.mindzero.qa_train import prepare
    elif is_image(d.observation):
        from jaxtom.mindzero.vl_train import prepare
    else:
        from jaxtom.mindzero.trainer import prepare
    return prepare


def make_mesh(config):
    """The update step's mesh from `config.mesh`."""
    from jaxtom import parallel
    return parallel.run_mesh(config.mesh.data, config.mesh.fsdp, config.mesh.tensor)


def train(config, progress: bool = True) -> dict:
    """The whole run of any MindZero task: data, tokenizer, model, warm-up, SSRL; returns
    the run directory, timings, final TrainState and the task's data (`train` / `test`).
    Rerunning it on a run directory resumes (a finished phase is not repeated)."""
    run_dir = storage.run_dir(config.trainer.workdir)
    t0 = time.perf_counter()
    if jax.process_index() == 0:
        storage.write_json(run_dir / "config.json", dataclasses.asdict(config), indent=1)
    mesh = make_mesh(config)
    prep = task_prepare(config)(config, run_dir, mesh)
    c = config.trainer
    config = dataclasses.replace(config, trainer=dataclasses.replace(
        c, row_len=prep.row_len(c.max_new_tokens), pad_id=prep.codec.pad_id,
        progress=progress and c.progress))
    timings = {"setup_s": time.perf_counter() - t0, **prep.timings}
    t1 = time.perf_counter()
    monitor = prep.monitor(config)
    model, scores = prep.model, None
    if config.mindzero.warmup.steps:
        budget = max(c.max_new_tokens, prep.teacher_budget)
        wcfg = dataclasses.replace(warmup_trainer_config(config), row_len=prep.row_len(budget))
        model, scores = checked_warm_up(
            config, model, run_dir, monitor, mesh, tasks=prep.warmup_tasks,
            rollout=prep.warmup_rollout(config, wcfg), trainer_config=wcfg,
            rebuild=prep.rebuild)
    timings["warmup_s"] = time.perf_counter() - t1
    if scores is None and c.eval_every:
        scores = monitor(0, model)
    if scores is not None:
        timings["start_monitor"] = scores
    t2 = time.perf_counter()
    best = BestModel(monitor, run_dir, model, scores) if prep.keep_best else None
    state = run_ssrl(model, prep.ssrl_tasks, prep.ssrl_rollout(config, model), config,
                     run_dir, best or monitor, timings, started=t2, run_started=t0, mesh=mesh,
                     best=best)
    return {"run_dir": str(run_dir), "timings": timings, "state": state, **prep.result}


def run_ssrl(model, tasks, rollout, config, run_dir: Path, monitor, timings: dict, *,
             started: float, run_started: float, mesh=None, best: BestModel | None = None):
    """The SSRL phase every MindZero run ends with: the one trainer under `run_dir/ssrl`
    (the held-out `monitor` as its eval hook when `trainer.eval_every`), the final model
    saved to `run_dir/checkpoint`, and the run's `timings` (plus ssrl_s from `started`,
    total_s from `run_started`) written beside it; with `best` (the monitor hook that also
    keeps the best model) its kept model is saved instead of the last. Returns the final
    TrainState."""
    ssrl = Trainer(model, tasks, rollout, config.step,
                   dataclasses.replace(config.trainer, workdir=str(run_dir / "ssrl")),
                   mesh=mesh, eval_hooks=[monitor] if config.trainer.eval_every else [],
                   desc="ssrl")
    state = ssrl.run()
    timings["ssrl_s"] = time.perf_counter() - started
    timings["ssrl_steps"] = int(state.step)
    final = ssrl.learner.model(state)
    if best is not None:
        final = best.chosen(final)
        timings["kept_step"], timings["kept_monitor_log_score"] = (
            best.record["step"], best.record["log_score"])
    save_model(final, run_dir / "checkpoint")
    timings["total_s"] = time.perf_counter() - run_started
    if jax.process_index() == 0:
        storage.write_json(storage.path(run_dir) / "timings.json", timings, indent=1)
    return state
