"""The `jaxtom` command line.

Each subcommand lives next to the code it drives and registers itself through an
`add_parser(subparsers)` function; this module only wires them together, importing each
lazily so that `jaxtom --help` stays fast.

An input error (`jaxtom.errors.UserError`: a missing model path, a truncated checkpoint, a
workdir that cannot be written) is printed as one `error:` line and exits with status 2;
`jaxtom --debug CMD ...` prints its traceback too. Any other exception is a bug and keeps
its traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback

from jaxtom.errors import UserError

# (subcommand, module, function that adds its parser)
SUBCOMMANDS: tuple[tuple[str, str, str], ...] = (
    ("train", "jaxtom.commands.train", "add_parser"),
    ("eval", "jaxtom.commands.train", "add_eval_parser"),
    ("mindzero", "jaxtom.commands.train", "add_mindzero_parser"),
    ("plan", "jaxtom.commands.plan", "add_parser"),
    ("gridworld", "jaxtom.commands.gridworld", "add_parser"),
    ("generate", "jaxtom.commands.generate", "add_parser"),
    ("doctor", "jaxtom.commands.doctor", "add_parser"),
    ("export", "jaxtom.commands.export", "add_parser"),
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="jaxtom", description=__doc__.splitlines()[0])
    parser.add_argument("--debug", action="store_true",
                        help="print the traceback of an input error, not only its line")
    subparsers = parser.add_subparsers(dest="command", required=True)
    for _, module_name, adder in SUBCOMMANDS:
        getattr(importlib.import_module(module_name), adder)(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except UserError as err:
        if args.debug:
            traceback.print_exc()
        print(user_error_line(err), file=sys.stderr)
        return 2


def user_error_line(err: UserError) -> str:
    """The one line an input error prints (a ConfigError's message starts with its own
    `config error:`)."""
    text = " ".join(str(err).split())
    return text if text.startswith("config error:") else f"error: {text}"


if __name__ == "__main__":
    sys.exit(main())
