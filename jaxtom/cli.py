"""The `jaxtom` command line.

Each subcommand lives next to the code it drives and registers itself through an
`add_parser(subparsers)` function; this module only wires them together, importing each
lazily so that `jaxtom --help` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# (subcommand, module providing `add_parser`)
SUBCOMMANDS: tuple[tuple[str, str], ...] = (
    ("gridworld", "jaxtom.gridworld.cli"),
    ("generate", "jaxtom.models.cli"),
    ("mindzero", "jaxtom.mindzero.cli"),
    ("train", "jaxtom.rl.cli"),
    ("eval", "jaxtom.eval.cli"),
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="jaxtom", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", required=True)
    for _, module_name in SUBCOMMANDS:
        importlib.import_module(module_name).add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
