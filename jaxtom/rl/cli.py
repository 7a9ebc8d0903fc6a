"""`jaxtom train CONFIG [section.field=value ...]`: GRPO from a configs/*.py file.

A bad config prints one `config error:` line naming the field and the expected form and
exits with code 2 before anything is written.
"""

from __future__ import annotations

import importlib
import json
import os
import sys


def build_model(config, mesh):
    from jaxtom import models
    from jaxtom.models.config import ModelConfig

    m = config.model
    if m.path:
        model = models.from_pretrained(m.path, dtype=m.dtype, mesh=mesh)
    else:
        model = models.init_decoder(ModelConfig(
            family=m.family, vocab_size=m.vocab_size, hidden_size=m.hidden_size,
            intermediate_size=m.intermediate_size, num_layers=m.num_layers,
            num_heads=m.num_heads, num_kv_heads=m.num_kv_heads, head_dim=m.head_dim,
            qk_norm=m.family == "qwen3", param_dtype=m.dtype, compute_dtype=m.dtype),
            seed=m.seed)
    if m.lora_rank:
        models.add_lora(model, rank=m.lora_rank, alpha=m.lora_alpha or None)
    return model


def build_task(config):
    """(task records, reward fn) for the configured task."""
    t = config.task
    if t.name == "toy_token":
        from jaxtom.rl.toy import TargetTokenReward, toy_token_tasks
        return (toy_token_tasks(t.num_prompts, t.prompt_len, config.model.vocab_size,
                                seed=config.trainer.seed), TargetTokenReward(t.target_token))
    module, _, attr = t.name.partition(":")
    return getattr(importlib.import_module(module), attr)(config)


def config_trainer(path: str):
    """The training entry point a config names with `TRAINER = "module:function"`, or None.

    Papers whose rollouts are not single completions (CToM's multi-turn controller) bring
    their own trainer on top of `jaxtom.rl`; the config says which, so `rl` never imports them.
    """
    import importlib.util
    from pathlib import Path

    if not Path(path).is_file():
        return None
    spec = importlib.util.spec_from_file_location(f"jaxtom_config_{Path(path).stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    entry = getattr(module, "TRAINER", None)
    if entry is None:
        return None
    module_name, _, attr = entry.partition(":")
    return getattr(importlib.import_module(module_name), attr)


def run(args) -> int:
    from jaxtom.config import ConfigError, load_config

    try:
        custom = config_trainer(args.config)
        if custom is not None:
            state = custom(args.config, args.overrides)
            print(json.dumps({"step": int(state.step)}))
            return 0
        config = load_config(args.config, args.overrides)
    except ConfigError as err:
        print(str(err), file=sys.stderr)
        return 2
    from jaxtom import parallel
    from jaxtom.rl.trainer import Trainer

    env = os.environ
    parallel.initialize_distributed(
        coordinator_address=env.get("JAX_COORDINATOR_ADDRESS"),
        num_processes=int(env["JAX_NUM_PROCESSES"]) if "JAX_NUM_PROCESSES" in env else None,
        process_id=int(env["JAX_PROCESS_ID"]) if "JAX_PROCESS_ID" in env else None)
    mesh = parallel.make_mesh(config.mesh.data, config.mesh.fsdp, config.mesh.tensor)
    model = build_model(config, mesh)
    tasks, reward_fn = build_task(config)
    trainer = Trainer(model, tasks, reward_fn, config.step, config.trainer, mesh=mesh)
    state = trainer.run()
    print(json.dumps({"step": int(state.step), "workdir": config.trainer.workdir}))
    return 0


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("train", help="GRPO training from a configs/*.py file",
                              description=__doc__.splitlines()[0])
    p.add_argument("config", help="path to a configs/*.py file defining get_config()")
    p.add_argument("overrides", nargs="*", metavar="section.field=value",
                   help="dotted overrides, e.g. trainer.total_steps=10 step.learning_rate=1e-3")
    p.set_defaults(func=run)
