"""``tensor-memory eval``: a checkpoint's metrics on seeded batches of its task (or over its sweep)."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any, Optional

EVAL_DESCRIPTION = (
    "Load a checkpoint directory (model.safetensors + config.json; nothing is unpickled) and report its "
    "metrics on freshly generated batches of its task. Batch i uses the seed derived from ('eval', SEED, i), "
    "so the same seed gives the same numbers. Metrics are fractions of scored positions; 'chance' is "
    "1/classes; 'gate_drift' (memory models) is the largest change of a memory read gate sigma(gamma) "
    "from its initial value, positive when the memory's read is amplified. masked_patches reports psnr (dB) "
    "and ssim per image over the hidden pixels, their '_mean_fill' floor (hidden pixels filled with the "
    "visible mean) and mse per hidden pixel; language_modelling adds cross_entropy (nats) and perplexity; "
    "action_recognition walks the UCF-101 test list once and reports top-1 (accuracy) and top5_accuracy.")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def add_eval_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the ``eval`` subcommand on ``subparsers`` (from ``parser.add_subparsers()``)."""
    parser = subparsers.add_parser("eval", help="evaluate a checkpoint on seeded batches of its task",
                                   description=EVAL_DESCRIPTION)
    parser.add_argument("--checkpoint", required=True, metavar="DIR",
                        help="checkpoint directory holding model.safetensors and config.json")
    parser.add_argument("--seed", type=int, default=0, help="evaluation seed (default 0)")
    parser.add_argument("--batches", type=_positive, default=8, help="number of batches (default 8)")
    parser.add_argument("--batch-size", type=_positive, default=64, help="sequences per batch (default 64)")
    parser.add_argument("--json", action="store_true",
                        help='print one JSON object: {"task", "backbone", "metrics"} '
                             '(with --sweep: {"task", "backbone", "sweep": [{"params", "metrics"}, ...]})')
    parser.add_argument("--sweep", action="store_true",
                        help="evaluate at every point of the task's parameter sweep instead of its trained setting")
    parser.set_defaults(func=run_eval)
    return parser


def _fmt(metric: str, value: Optional[float]) -> str:
    from .evaluation import format_metric

    return "n/a" if value is None else format_metric(metric, value)


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(headers, widths)).rstrip(),
             "  ".join("-" * w for w in widths)]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    return "\n".join(lines)


def _report(ckpt: Any, args: argparse.Namespace, result: dict, points: Optional[list[dict]]) -> str:
    params = ", ".join(f"{k}={v}" for k, v in ckpt.task.config.to_dict().items())
    head = [f"checkpoint  {ckpt.path}",
            f"task        {ckpt.task.name} ({params})",
            f"backbone    {ckpt.model.backbone.config.kind}",
            f"evaluation  seed {args.seed}, {args.batches} batches of {args.batch_size}", ""]
    if points is None:
        rows = [[metric, _fmt(metric, value)] for metric, value in result["metrics"].items()]
        return "\n".join(head) + _table(["metric", "value"], rows)
    trained = ckpt.task.config.to_dict()  # show the parameters that vary or differ from the trained setting
    varied = [k for k in trained if len({json.dumps(p["params"].get(k)) for p in points} | {json.dumps(trained[k])}) > 1]
    metrics = list(dict.fromkeys(m for p in points for m in p["metrics"]))
    rows = [[str(p["params"][k]) for k in varied] + [_fmt(m, p["metrics"].get(m)) for m in metrics] for p in points]
    return "\n".join(head) + _table(varied + metrics, rows)


def run_eval(args: argparse.Namespace) -> int:
    from .checkpoint import CheckpointError, load_checkpoint
    from .evaluation import evaluate_checkpoint, sweep

    try:
        ckpt = load_checkpoint(args.checkpoint)
        if args.sweep:
            points = sweep(ckpt, args.seed, args.batches, args.batch_size)
            result = {"task": ckpt.task.name, "backbone": ckpt.model.backbone.config.kind, "sweep": points}
        else:
            points = None
            full = evaluate_checkpoint(ckpt, args.seed, args.batches, args.batch_size)
            result = {"task": full["task"], "backbone": full["backbone"], "metrics": full["metrics"]}
    except (CheckpointError, ValueError) as error:  # one line, no traceback
        message = " ".join(str(error).split())
        print(f"tensor-memory eval: error: {message}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result, allow_nan=False))
    else:
        print(_report(ckpt, args, result, points))
    return 0


__all__ = ["add_eval_parser", "run_eval"]
