"""`jaxtom eval CONFIG [--checkpoint DIR] [section.field=value ...]` for either paper.

The config file decides: a MindZero config (its `config()` returns a `MindZeroConfig`) is
evaluated by `jaxtom.mindzero.run.evaluate_run` (results.md / results.json and plots beside
the checkpoint; the checkpoint defaults to the config's `run_dir/checkpoint`); anything else is
a CToM config and prints CToM's table 1/2 columns.
"""

from __future__ import annotations

from pathlib import Path


def is_mindzero_config(path: str | Path) -> bool:
    from jaxtom.mindzero.config import MindZeroConfig, config_module
    module = config_module(path)
    return callable(getattr(module, "config", None)) and isinstance(module.config(),
                                                                    MindZeroConfig)


def run(args) -> int:
    if is_mindzero_config(args.config):
        from jaxtom.mindzero.config import load_config
        from jaxtom.mindzero.run import evaluate_run
        cfg = load_config(args.config, args.overrides)
        checkpoint = Path(args.checkpoint or Path(cfg.run_dir) / "checkpoint")
        if not checkpoint.exists():
            raise SystemExit(f"no checkpoint at {checkpoint}; train first (jaxtom mindzero "
                             f"train {args.config}) or pass --checkpoint DIR")
        evaluate_run(cfg, checkpoint)
        return 0
    if args.checkpoint:
        raise SystemExit("--checkpoint is for MindZero configs; a CToM config evaluates the "
                         "latest checkpoint under its trainer.workdir")
    from jaxtom.ctom.evaluate import run_eval
    run_eval(args.config, args.overrides)
    return 0


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("eval", help="evaluate a config: MindZero results table or "
                                           "CToM table 1/2 columns", description=__doc__)
    p.add_argument("config", help="a configs/mindzero_*.py or configs/ctom_*.py file")
    p.add_argument("overrides", nargs="*", help="section.field=value")
    p.add_argument("--checkpoint", help="MindZero: the run's checkpoint directory "
                                        "(default: run_dir/checkpoint)")
    p.set_defaults(func=run)
