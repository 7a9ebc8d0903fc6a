"""`jaxtom train|eval CONFIG [section.field=value ...]` for every file in `configs/`, and
`jaxtom mindzero run|train|eval` (the MindZero main job: train, then evaluate).

What trains is decided by the config's sections: a `mindzero` section runs MindZero's warm-up
and SSRL phases, a `ctom` section CToM's conversation rollouts, neither the generic
single-completion task; all of them on the one trainer (`jaxtom.rl.Trainer`). A bad config
prints one `config error:` line naming the field and exits with status 2 before anything is
written or any JAX backend starts. Multi-process runs read the launcher's variables
(JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES, JAX_PROCESS_ID): `jax.distributed.initialize`
runs right after the config is read, before any JAX work.

SIGTERM (or JAX's preemption sync point) stops training after the step in progress, on every
process: that step's checkpoint is saved and the command prints one line, `jaxtom: stopped
by SIGTERM (exit 143); checkpoint at step N saved to DIR; rerun the same command to resume`,
and exits with status 143 (`jaxtom.rl.preemption.STOP_EXIT_CODE`). No later phase starts
(a MindZero warm-up stopped is not followed by SSRL, nor training by `mindzero run`'s
evaluation); the same command resumes from that step.
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import os
import sys

import jax

from jaxtom import models, parallel, storage
from jaxtom.config import ConfigError, load_config, resolve_model_path
from jaxtom.ctom.evaluate import run_eval
from jaxtom.ctom.train import train as train_ctom
from jaxtom.mindzero import task as mindzero_task
from jaxtom.mindzero.driver import train as train_mindzero
from jaxtom.models import check_checkpoint
from jaxtom.rl.preemption import TrainingStopped
from jaxtom.rl.toy import TargetTokenReward, toy_token_tasks
from jaxtom.rl.trainer import CompletionRollout, Trainer


def load(args):
    """The validated config (a MindZero config's task registered and of its section), or
    None after printing the one-line error."""
    try:
        config = load_config(args.config, args.overrides)
        if config.kind == "mindzero":
            mindzero_task.get(config)
        return config
    except ConfigError as err:
        print(str(err), file=sys.stderr)
        return None


def start_distributed() -> None:
    env = os.environ
    parallel.initialize_distributed(
        coordinator_address=env.get("JAX_COORDINATOR_ADDRESS"),
        num_processes=int(env["JAX_NUM_PROCESSES"]) if "JAX_NUM_PROCESSES" in env else None,
        process_id=int(env["JAX_PROCESS_ID"]) if "JAX_PROCESS_ID" in env else None)


def make_mesh(config):
    return parallel.run_mesh(config.mesh.data, config.mesh.fsdp, config.mesh.tensor)


def build_model(config, mesh):
    """The generic task's policy: a checkpoint (`model.path`) or a random model."""
    m = config.model
    if m.path:
        model = models.from_pretrained(resolve_model_path(m.path), dtype=m.param_dtype,
                                       compute_dtype=m.compute_dtype, mesh=mesh)
    else:
        model = models.init_decoder(m.random_model_config(), seed=m.seed, mesh=mesh)
    if m.lora_rank:
        models.add_lora(model, rank=m.lora_rank, alpha=m.lora_alpha or None)
    return model


def build_task(config):
    """(task records, reward fn) of the generic task."""
    t = config.task
    if t.name == "toy_token":
        return (toy_token_tasks(t.num_prompts, t.prompt_len, config.model.vocab_size,
                                seed=config.trainer.seed), TargetTokenReward(t.target_token))
    module, _, attr = t.name.partition(":")
    return getattr(importlib.import_module(module), attr)(config)


def mindzero_evaluate(config, checkpoint, test=None, train=None):
    """Evaluate a MindZero checkpoint with its task's table (`jaxtom.mindzero.task`)."""
    return mindzero_task.get(config).evaluate(config, checkpoint, test=test, train=train)


def record_config(config) -> None:
    """The config as `workdir/config.json` (process 0 writes it), as MindZero's driver
    records its own: what `jaxtom export` rebuilds the run's model from."""


    if jax.process_index() == 0:
        storage.write_json(storage.run_dir(config.trainer.workdir) / "config.json",
                           dataclasses.asdict(config), indent=1)


def train(config, progress: bool = True) -> dict:
    """Trains any config to its last step (resuming from its workdir); a JSON-able summary."""

    config = dataclasses.replace(config, trainer=dataclasses.replace(
        config.trainer, progress=config.trainer.progress and progress))
    if config.kind == "mindzero":
        out = train_mindzero(config, progress=config.trainer.progress)
        return {"step": int(out["state"].step), "workdir": out["run_dir"]}
    record_config(config)
    mesh = make_mesh(config)
    if config.kind == "ctom":
        state = train_ctom(config, mesh=mesh)
    else:
        tasks, reward_fn = build_task(config)
        trainer = Trainer(build_model(config, mesh), tasks,
                          CompletionRollout(reward_fn, config.trainer), config.step,
                          config.trainer, mesh=mesh, desc="grpo")
        state = trainer.run()
    return {"step": int(state.step), "workdir": config.trainer.workdir}


def evaluate(config, config_path: str, overrides, checkpoint: str | None = None) -> int:
    if config.kind == "mindzero":
        ckpt = storage.path(checkpoint or storage.path(config.trainer.workdir) / "checkpoint")
        if not ckpt.exists():
            print(f"no checkpoint at {ckpt}; train first (jaxtom train {config_path}) or pass "
                  "--checkpoint DIR", file=sys.stderr)
            return 2
        # the results are written beside the checkpoint
        storage.check_writable(ckpt.parent, "the run directory")
        mindzero_evaluate(config, ckpt)
        return 0
    if checkpoint:
        print("--checkpoint is for MindZero configs; a CToM config evaluates the latest "
              "checkpoint under its trainer.workdir", file=sys.stderr)
        return 2
    if config.kind == "ctom":
        storage.check_writable(config.trainer.workdir)  # its checkpoints; the results
        run_eval(config_path, overrides)
        return 0
    print(f"config error: CONFIG: expected a MindZero or CToM config to evaluate, got "
          f"{config_path!r} (the generic task logs its reward while training)", file=sys.stderr)
    return 2


def _command(run):
    """A subcommand: load the config (one line + exit 2 if wrong), start multi-process JAX
    when launched so, then `run(args, config)`; a run stopped by SIGTERM prints its one line
    and exits with `STOP_EXIT_CODE`."""
    def command(args) -> int:
        config = load(args)
        if config is None:
            return 2
        start_distributed()
        try:
            return run(args, config)
        except TrainingStopped as stop:
            print(f"jaxtom: {stop}", file=sys.stderr, flush=True)
            return stop.exit_code
    return command


def preflight(config) -> None:
    """A training command's first step, before any model is built or data generated:
    `trainer.workdir` can be created and written, and `model.path` is a readable checkpoint
    (its config.json and safetensors headers, or its GGUF header), else one input error."""
    storage.check_shared_workdir(config.trainer.workdir)
    storage.check_writable(config.trainer.workdir)
    if config.model.path:
        check_checkpoint(resolve_model_path(config.model.path))


@_command
def _train_cmd(args, config) -> int:
    preflight(config)
    print(json.dumps(train(config, progress=not args.quiet)))
    return 0


@_command
def _eval_cmd(args, config) -> int:
    return evaluate(config, args.config, args.overrides, args.checkpoint)


@_command
def _mindzero_cmd(args, config) -> int:
    if config.kind != "mindzero":
        print(f"config error: CONFIG: expected a MindZero config (with a mindzero section), "
              f"got {args.config!r}", file=sys.stderr)
        return 2
    if args.action == "eval":
        return evaluate(config, args.config, args.overrides, args.checkpoint)
    preflight(config)
    out = train_mindzero(config, progress=not args.quiet and config.trainer.progress)
    t = out["timings"]
    print(f"trained in {t['total_s']:.0f} s (setup {t['setup_s']:.0f} s, warm-up "
          f"{t['warmup_s']:.0f} s, SSRL {t['ssrl_s']:.0f} s / {t['ssrl_steps']} steps); "
          f"run dir {out['run_dir']}")
    if "kept_step" in t:
        print(f"kept the model of SSRL step {t['kept_step']} (0: the warm-up), the best "
              f"validation monitor log score ({t['kept_monitor_log_score']:.3f})")
    if args.action == "run":
        results = mindzero_evaluate(config, storage.path(out["run_dir"]) / "checkpoint",
                                    test=out["test"],
                                    train=out.get("train"))
        print(f"evaluated in {results['eval_s']:.0f} s")
    return 0


def _common(p) -> None:
    p.add_argument("config", help="a configs/*.py file defining get_config()")
    p.add_argument("overrides", nargs="*", metavar="section.field=value",
                   help="dotted overrides, e.g. trainer.total_steps=10 step.learning_rate=1e-3")


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("train", help="train any configs/*.py file on the one trainer",
                              description=__doc__.splitlines()[0])
    _common(p)
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=_train_cmd)


def add_eval_parser(subparsers) -> None:
    p = subparsers.add_parser("eval", help="evaluate a config: MindZero results table or "
                                           "CToM table 1/2 columns")
    _common(p)
    p.add_argument("--checkpoint", help="MindZero: the run's checkpoint directory "
                                        "(default: trainer.workdir/checkpoint)")
    p.set_defaults(func=_eval_cmd)


def add_mindzero_parser(subparsers) -> None:
    p = subparsers.add_parser("mindzero", help="MindZero: run (train, then evaluate) | train "
                                               "| eval")
    p.add_argument("action", choices=("run", "train", "eval"))
    _common(p)
    p.add_argument("--checkpoint", help="eval: the run's checkpoint directory")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=_mindzero_cmd)
