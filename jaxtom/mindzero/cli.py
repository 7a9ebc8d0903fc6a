"""`jaxtom mindzero run|train|eval CONFIG [key.sub=value ...]`.

`run` trains (warm-up + SSRL, progress bar, tensorboard logs under RUN_DIR/tb) and then
evaluates on held-out episodes; `eval --checkpoint DIR` evaluates a saved run and writes
RUN_DIR/results.md, results.json and the goal-accuracy PNGs.
"""

from __future__ import annotations

import argparse
import time


def _run(args) -> int:
    from jaxtom.mindzero.config import load_config
    cfg = load_config(args.config, args.overrides)
    if args.action in ("run", "train"):
        from jaxtom.mindzero.trainer import train
        start = time.perf_counter()
        out = train(cfg, progress=not args.quiet)
        t = out["timings"]
        print(f"trained in {t['total_s']:.0f} s (setup {t['setup_s']:.0f} s, warm-up "
              f"{t['warmup_s']:.0f} s, SSRL {t['ssrl_s']:.0f} s / {t['ssrl_steps']} steps); "
              f"run dir {out['run_dir']}")
        if args.action == "run":
            from pathlib import Path
            from jaxtom.mindzero.run import evaluate_run
            results = evaluate_run(cfg, Path(out["run_dir"]) / "checkpoint", test=out["test"])
            print(f"evaluated in {results['eval_s']:.0f} s; total "
                  f"{time.perf_counter() - start:.0f} s")
        return 0
    from jaxtom.mindzero.run import evaluate_run
    if not args.checkpoint:
        raise SystemExit("eval needs --checkpoint DIR (a run's checkpoint directory)")
    evaluate_run(cfg, args.checkpoint)
    return 0


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("mindzero", help="MindZero SSRL on the gridworld: train / eval",
                              description=__doc__)
    p.add_argument("action", choices=("run", "train", "eval"))
    p.add_argument("config", help="configs/mindzero_*.py")
    p.add_argument("overrides", nargs="*", help="dotted overrides, e.g. rl.steps=50")
    p.add_argument("--checkpoint", help="eval: the run's checkpoint directory")
    p.add_argument("--quiet", action="store_true", help="no progress bars")
    p.set_defaults(func=_run)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m jaxtom.mindzero")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["mindzero", *(argv if argv is not None else __import__("sys").argv[1:])])
    return int(args.func(args) or 0)
