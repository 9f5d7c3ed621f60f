"""The evaluations ``tensor-memory eval`` prints as tables: plain-text tables, and the long-range evaluations
(``--stream``: language streamed with its state carried; ``--distance``: accuracy by how long ago the answer was
shown), as a table or JSON."""

from __future__ import annotations

import argparse
import json
from typing import Any

from ..accelerator import model_device


def text_table(headers: list[str], rows: list[list[str]]) -> str:
    """``rows`` of strings under ``headers``, each column padded to its widest cell, a rule under the headers."""
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    lines = [
        "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip(),
        "  ".join("-" * w for w in widths),
    ]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(lines)


def eval_stream(ckpt: Any, args: argparse.Namespace) -> int:
    """``eval --stream``: the checkpoint's test split as a stream, state carried against reset."""
    from .streamed import stream_evaluation

    result = stream_evaluation(ckpt, args.segment, args.rows, args.tokens)
    runs = [name for name in result if isinstance(result[name], dict)]
    if args.json:
        print(
            json.dumps(
                {"task": ckpt.task.name, "backbone": ckpt.model.backbone.config.kind, "stream": result}, allow_nan=False
            )
        )
        return 0
    W = result["W"]
    rows = [
        [label] + ["n/a" if result[run][key] is None else f"{result[run][key]:.{digits}f}" for run in runs]
        for label, key, digits in (
            ("perplexity", "perplexity", 2),
            (f"NLL (nats), t >= W = {W}", "nll_t>=W", 3),
            (f"NLL (nats), t >= 4W = {4 * W}", "nll_t>=4W", 3),
        )
    ]
    lines = [
        f"checkpoint  {ckpt.path}",
        f"backbone    {ckpt.model.backbone.config.kind}",
        f"stream      the test split's first {result['tokens']:,} tokens in {result['rows']} rows, "
        f"{result['segment']} tokens a call",
        "",
        text_table(["", *runs], rows),
    ]
    if args.sweep:  # the curve: mean NLL by position, log-binned
        bins = [(b["from"], b["to"]) for b in result[runs[0]]["curve"]]
        nll = {run: {(b["from"], b["to"]): b["nll"] for b in result[run]["curve"]} for run in runs}
        lines += [
            "",
            text_table(
                ["positions", *runs],
                [
                    [f"{lo}-{hi - 1}"] + [f"{nll[run][(lo, hi)]:.3f}" if (lo, hi) in nll[run] else "" for run in runs]
                    for lo, hi in bins
                ],
            ),
        ]
    print("\n".join(lines))
    return 0


def eval_distance(ckpt: Any, args: argparse.Namespace) -> int:
    """``eval --distance``: accuracy by how long ago the answer was shown, reads on and off."""
    from .distance import distance_evaluation

    result = distance_evaluation(ckpt, args.seed, args.batches, args.batch_size, task_params=dict(args.param) or None)
    if args.json:
        print(
            json.dumps(
                {"task": ckpt.task.name, "backbone": ckpt.model.backbone.config.kind, "distance": result},
                allow_nan=False,
            )
        )
        return 0
    runs = [run for run in ("accuracy", "reads_off") if result["rows"] and run in result["rows"][0]]
    unit, per = result["unit"], result["tokens_per_unit"]
    rows = [
        [str(row["from"]) + ("" if row["to"] == row["from"] else f"-{row['to']}"), str(row["scored"])]
        + [f"{100 * row[run]:.1f}%" for run in runs]
        for row in result["rows"]
    ]
    reach = f"{result['W']} tokens" + (f" = {result['W'] / per:.1f} {unit}" if per > 1 else "")
    print(
        "\n".join(
            [
                f"checkpoint  {ckpt.path}",
                f"backbone    {ckpt.model.backbone.config.kind}",
                f"evaluation  seed {args.seed}, {args.batches} batches of {args.batch_size} "
                f"({model_device(ckpt.model)}, {args.precision})",
                f"attention   reaches {reach} back in each layer",
                "",
                text_table([f"distance ({unit})", "scored", *[r.replace("_", " ") for r in runs]], rows),
            ]
        )
    )
    return 0


__all__ = ["text_table", "eval_stream", "eval_distance"]
