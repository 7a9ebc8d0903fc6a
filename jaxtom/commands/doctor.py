"""`jaxtom doctor CONFIG [section.field=value ...]`: checks this host against a config before
a long run starts.

One line per check (`jaxtom.preflight`), `ok` or `FAIL` with what is wrong and what was
expected, then a summary; exit status 2 when any check fails. It starts multi-process JAX the
way `jaxtom train` does (JAXTOM_DISTRIBUTED, the launcher's variables, a Cloud TPU VM), so on a
pod slice run it on every worker at once, with the environment the run will have.
"""

from __future__ import annotations

import argparse
import sys

import jax

from jaxtom import preflight
from jaxtom.commands import train as train_command
from jaxtom.config import ConfigError, load_config
from jaxtom.preflight import Check


def _print(check: Check, prefix: str) -> None:
    print(f"{prefix}{'ok  ' if check.ok else 'FAIL'}  {check.name:<16}{check.detail}",
          flush=True)


def _prefix() -> str:
    n = jax.process_count()
    return f"[process {jax.process_index()}/{n}] " if n > 1 else ""


def run(args) -> int:

    checks: list[Check] = []

    def record(check: Check, prefix: str = "") -> None:
        checks.append(check)
        _print(check, prefix)

    try:
        config = load_config(args.config, args.overrides)
    except ConfigError as err:
        record(Check("config", False, str(err)))
    else:
        record(Check("config", True, f"{args.config} ({config.kind})"))
        prefix = ""
        try:
            train_command.start_distributed()
        except Exception as err:  # noqa: BLE001  (the finding itself, printed in one line)
            # JAX's own checks need the processes; the storage checks below do not
            record(Check("processes", False, f"jax.distributed.initialize failed: "
                         f"{type(err).__name__}: {err}; expected every host to start this "
                         "command at once, with the same coordinator"))
        else:
            prefix = _prefix()
            record(preflight.check_processes(config, args.processes), prefix)
            record(preflight.check_backend(args.backend), prefix)
            record(preflight.check_mesh(config.mesh), prefix)
        record(preflight.check_workdir(config.trainer.workdir), prefix)
        record(preflight.check_model(config.model.path), prefix)
        for check in preflight.check_simulator(config, args.timeout):
            record(check, prefix)
    failed = [c.name for c in checks if not c.ok]
    if failed:
        print(f"doctor: {len(failed)} of {len(checks)} checks failed ({', '.join(failed)})",
              flush=True)
        return 2
    print(f"doctor: all {len(checks)} checks passed", flush=True)
    return 0


def _arguments(p) -> None:
    p.add_argument("config", help="a configs/*.py file defining get_config()")
    p.add_argument("overrides", nargs="*", metavar="section.field=value",
                   help="the overrides the run will be given, e.g. mesh.fsdp=-1 "
                        "trainer.workdir=gs://bucket/runs/NAME")
    p.add_argument("--backend", choices=("cpu", "gpu", "tpu"),
                   help="the backend JAX must run on (default: any, but a host with TPU or "
                        "GPU chips must not run on the CPU)")
    p.add_argument("--processes", type=int, default=None,
                   help="the number of processes the run must have (one per host)")
    p.add_argument("--timeout", type=float, default=5.0,
                   help="seconds to wait for the CToM simulator's answer (default 5)")


def add_parser(subparsers) -> None:
    p = subparsers.add_parser("doctor", help="check this host (backend, devices, processes, "
                              "storage, model, simulator) against a config before a run",
                              description=__doc__.splitlines()[0])
    _arguments(p)
    p.set_defaults(func=run)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="jaxtom doctor", description=__doc__.splitlines()[0])
    _arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
