"""The ``tensor-memory`` command line (also ``python -m tensor_memory_cli``).

It sits above the three packages and assembles each layer's subcommands: ``demo``, ``train`` and
``eval`` from ``tensor_memory``, ``trace``, ``report``, ``audit`` and ``import`` from ``analysis``,
``app`` from ``app``. So the model package never imports the layers above it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from tensor_memory.errors import describe

# What to give a flag whose value was empty, by the flag's metavar (else: its choices, or "a value").
WHAT_TO_GIVE = {
    "DIR": "a folder",
    "FILE": "a file",
    "PATH": "a file or a folder",
    "FILE.html": "a file name",
    "DEVICE": "auto, cpu, cuda or cuda:N",
    "ADDRESS": "an address (127.0.0.1: this machine only)",
    "PREFIX": "a prefix, or leave the flag out for none",
    "NAME": "a name, or leave the flag out",
}


class OneLineParser(argparse.ArgumentParser):
    """Refuses a bad command line in one line, what to fix and where to read more, rather than after a usage block
    (its subcommands' parsers are of this class too). An empty value (``--out ''``, ``--trace=``) is refused for
    every flag: it is a mistake (an unset shell variable), never the flag left out."""

    def error(self, message: str):  # type: ignore[override]
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")

    def _get_values(self, action: argparse.Action, arg_strings: list[str]):  # a flag's values from the command line
        if "" in arg_strings and action.option_strings:  # (not its default, which may well be "")
            what = WHAT_TO_GIVE.get(str(action.metavar))
            what = what or (f"one of {', '.join(map(str, action.choices))}" if action.choices else action.metavar)
            self.error(f"argument {'/'.join(action.option_strings)}: empty; give {what or 'a value'}")
        return super()._get_values(action, arg_strings)


def build_parser() -> argparse.ArgumentParser:
    from analysis.cli import add_trace_parsers
    from app.cli import add_app_parser
    from tensor_memory.cli import add_model_parsers

    parser = OneLineParser(
        prog="tensor-memory", description="Tensor Memory: a fixed-size recurrent 3D voxel memory for Transformers."
    )
    parser.add_argument(
        "--debug", action="store_true", help="show the full traceback of an error instead of its one-line summary"
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    add_model_parsers(commands)
    add_trace_parsers(commands)
    add_app_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in argv  # accepted anywhere on the line, before or after the command
    args = build_parser().parse_args([a for a in argv if a != "--debug"])
    args.debug = debug  # the app shows its errors' details to the browser only then
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print(f"tensor-memory {args.command}: interrupted", file=sys.stderr)
        return 130
    except Exception as error:  # every failure: one line on stderr and a non-zero exit; --debug shows all
        if debug:
            raise
        print(f"tensor-memory {args.command}: error: {describe(error)}", file=sys.stderr)
        return 2


__all__ = ["main", "build_parser"]
