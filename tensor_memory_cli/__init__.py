"""The ``tensor-memory`` command line (also ``python -m tensor_memory_cli``).

It sits above the three packages and assembles each layer's subcommands: ``demo``, ``train`` and
``eval`` from ``tensor_memory``, ``trace`` and ``report`` from ``analysis``, ``app`` from ``app``.
So the model package never imports the layers above it.
"""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence


def build_parser() -> argparse.ArgumentParser:
    from analysis.cli import add_trace_parsers
    from app.cli import add_app_parser
    from tensor_memory.cli import add_model_parsers

    parser = argparse.ArgumentParser(
        prog="tensor-memory",
        description="Tensor Memory: a fixed-size recurrent 3D voxel memory for Transformers.")
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    add_model_parsers(commands)
    add_trace_parsers(commands)
    add_app_parser(commands)
    return parser


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except (ValueError, FloatingPointError) as error:  # bad settings or input: one clear line, no traceback
        print(f"tensor-memory {args.command}: error: {error}", file=sys.stderr)
        return 2


__all__ = ["main", "build_parser"]
