"""``tensor-memory trace``, ``report`` and ``audit``: capture a trace, turn one into an offline report, audit causality."""

from __future__ import annotations

import argparse
import json
from typing import Any

from tensor_memory.files import check_output_path

from analysis.traces.trace import VOLUME_DTYPES

TRACE_DESCRIPTION = (
    "Run one sample of a checkpoint's task through the model with recording on and save the trace: per "
    "memory layer and chunk, h and c after the update (float16, or int8 with --volumes int8), read/write coordinates, sigma, content, "
    "the read vector, the gate volumes i/f/o/g and sigma(gamma); per chunk the prediction, its class "
    "probabilities and the target; and the task's metadata. Sample INDEX of stream SEED is the same every "
    "time, so the same checkpoint, seed and index give the same trace.")

REPORT_DESCRIPTION = (
    "Turn a trace into one self-contained HTML page (Plotly's JavaScript inlined, no network needed to "
    "open it): the addressing verdict and its reasons, the memory's volumes, the read/write trajectories "
    "and footprints, sigma and gates over time, the prediction timeline and, for occlusion, the belief "
    "through the occlusion and what the memory held. --json prints the numbers instead of (or besides) "
    "writing the page.")


def _param(text: str) -> tuple[str, Any]:
    """``name=value`` with value parsed as JSON when it is JSON (numbers, booleans), else kept as text."""
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    name, value = text.split("=", 1)
    try:
        return name.strip(), json.loads(value)
    except ValueError:
        return name.strip(), value


def _trace(args: argparse.Namespace) -> int:
    from analysis.traces.capture import capture

    check_output_path(args.out, args.overwrite)
    trace = capture(args.checkpoint, seed=args.seed, index=args.index, gates=not args.no_gates,
                    cells=not args.no_cells, progress=False if args.no_progress else None, volumes=args.volumes,
                    **dict(args.param))
    path = trace.save(args.out)
    size = path.stat().st_size
    print(f"Trace of {trace.info['checkpoint_name']} (task {trace.info.get('task')}, seed {args.seed}, index "
          f"{args.index}): {trace.num_chunks} chunks, {len(trace.layers)} memory layer(s), "
          f"{size / 1e6:.1f} MB → {path}")
    return 0


def _report(args: argparse.Namespace) -> int:
    from analysis.figures.report import report_numbers, write_report
    from analysis.traces.trace import load_trace

    if args.out:
        check_output_path(args.out, args.overwrite, inputs=(args.trace,))
    trace = load_trace(args.trace)
    if args.out:
        path = write_report(trace, args.out)
        if not args.json:
            print(f"Report for {trace.info['checkpoint_name']} → {path} (open it in any browser, offline)")
    if args.json:
        print(json.dumps(report_numbers(trace), indent=2))
    if not args.out and not args.json:
        raise ValueError("nothing to do: pass --out FILE.html, --json, or both")
    return 0


AUDIT_DESCRIPTION = (
    "Check a checkpoint for leaks from later inputs to earlier outputs. On one evaluation sample, the "
    "encoder's token features after position t are replaced with noise, for up to 32 positions t spread "
    "over the sequence, and the largest change of every layer's output and of the logits at positions <= t "
    "is measured (relative to their RMS); a causal model changes by exactly 0. Prints the verdict and the "
    "largest change per output; --json prints {\"verdict\": \"causal\" | \"leaks\", \"max_change\", ...} "
    "with the per-position heatmap. Exit status 0 either way.")


def _audit(args: argparse.Namespace) -> int:
    from analysis.measures.causality import audit_checkpoint
    from tensor_memory import load_checkpoint

    result = audit_checkpoint(load_checkpoint(args.checkpoint), seed=args.seed)
    if args.json:
        print(json.dumps(result))
        return 0
    print(f"{args.checkpoint}: {result['verdict']} (largest change of an output at or before a perturbed "
          f"position: {result['max_change']:.3g} of its RMS; tolerance {result['tolerance']:.0e})")
    for name, numbers in result["outputs"].items():
        leak = "" if numbers["leak_from"] is None else f", first leaks at t = {numbers['leak_from']}"
        print(f"  {name:>10}: {numbers['max_change']:.3g}{leak}")
    if result.get("bidirectional"):
        print("  (a bidirectional model, causal=False: it reads each sequence whole by design, so later inputs "
              "move earlier outputs; the audit is for causal models)")
    return 0


def add_trace_parsers(subparsers: Any) -> None:
    """Register ``trace`` and ``report`` on ``subparsers`` (from ``parser.add_subparsers()``)."""
    trace = subparsers.add_parser("trace", help="record one sample through a checkpoint into a trace file",
                                  description=TRACE_DESCRIPTION)
    trace.add_argument("--checkpoint", required=True, metavar="DIR", help="checkpoint directory (a tensor backbone)")
    trace.add_argument("--seed", type=int, default=0, help="sample stream seed (default 0)")
    trace.add_argument("--index", type=int, default=0, help="sample index within the stream (default 0)")
    trace.add_argument("--out", required=True, metavar="FILE", help="trace file to write (.safetensors)")
    trace.add_argument("--param", type=_param, action="append", default=[], metavar="NAME=VALUE",
                       help="override a task parameter for this sample, e.g. --param occlusion_length=6 "
                            "(repeatable; only parameters that keep the model's shapes)")
    trace.add_argument("--no-gates", action="store_true", help="leave out the gate volumes (a smaller file)")
    trace.add_argument("--no-cells", action="store_true", help="leave out the cell volume c (a smaller file)")
    trace.add_argument("--volumes", choices=VOLUME_DTYPES, default="float16",
                       help="how h, c and the gate volumes are stored: float16 (default), or int8 with a scale "
                            "per chunk and channel — half the size, each value within 1/254 of its channel's "
                            "largest magnitude in that chunk")
    trace.add_argument("--overwrite", action="store_true", help="replace --out if it exists (never a checkpoint's file)")
    trace.add_argument("--no-progress", action="store_true", help="no progress bar")
    trace.set_defaults(func=_trace)

    report = subparsers.add_parser("report", help="write an offline HTML report (or JSON numbers) for a trace",
                                   description=REPORT_DESCRIPTION)
    report.add_argument("--trace", required=True, metavar="FILE", help="trace file from `tensor-memory trace`")
    report.add_argument("--out", metavar="FILE.html", help="HTML report to write")
    report.add_argument("--overwrite", action="store_true",
                        help="replace --out if it exists (never the trace itself or a checkpoint's file)")
    report.add_argument("--json", action="store_true",
                        help='print {"addressing": {"verdict", ...}, "gates": {...}, "predictions": {...}, '
                             '"occlusion": {...}} as JSON')
    report.set_defaults(func=_report)

    audit = subparsers.add_parser("audit", help="check a checkpoint for leaks from future inputs (causality audit)",
                                  description=AUDIT_DESCRIPTION)
    audit.add_argument("--checkpoint", required=True, metavar="DIR", help="checkpoint directory (any backbone)")
    audit.add_argument("--seed", type=int, default=0, help="seed of the evaluation sample and the noise (default 0)")
    audit.add_argument("--json", action="store_true", help="print the whole result as one JSON object")
    audit.set_defaults(func=_audit)


__all__ = ["add_trace_parsers"]
