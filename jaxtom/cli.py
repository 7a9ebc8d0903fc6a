"""The `jaxtom` command line.

Each subcommand lives next to the code it drives and registers itself through an
`add_parser(subparsers)` function; this module only wires them together, importing each
lazily so that `jaxtom --help` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys

# (subcommand, module, function that adds its parser)
SUBCOMMANDS: tuple[tuple[str, str, str], ...] = (
    ("train", "jaxtom.commands.train", "add_parser"),
    ("eval", "jaxtom.commands.train", "add_eval_parser"),
    ("mindzero", "jaxtom.commands.train", "add_mindzero_parser"),
    ("plan", "jaxtom.commands.plan", "add_parser"),
    ("gridworld", "jaxtom.commands.gridworld", "add_parser"),
    ("generate", "jaxtom.commands.generate", "add_parser"),
    ("doctor", "jaxtom.commands.doctor", "add_parser"),
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="jaxtom", description=__doc__.splitlines()[0])
    subparsers = parser.add_subparsers(dest="command", required=True)
    for _, module_name, adder in SUBCOMMANDS:
        getattr(importlib.import_module(module_name), adder)(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
