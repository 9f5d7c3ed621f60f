"""``tensor-memory trace``, ``report``, ``audit`` and ``import``: capture a trace, turn one into an offline report,
audit causality, trace a model trained with the paper's public code."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from analysis.traces.trace import VOLUME_DTYPES
from tensor_memory.accelerator import add_device_argument
from tensor_memory.cli import positive, seed, task_param
from tensor_memory.shipped import checkpoint_folder
from tensor_memory.storage.files import check_output_path

TRACE_DESCRIPTION = (
    "Run one sample of a checkpoint's task through the model with recording on and save the trace: per "
    "memory layer and chunk, h and c after the update (float16, or int8 with --volumes int8), read/write "
    "coordinates, sigma, content, "
    "the read vector, the gate volumes i/f/o/g and sigma(gamma); per chunk the prediction, its class "
    "probabilities and the target; and the task's metadata. Sample INDEX of stream SEED is the same every "
    "time, so the same checkpoint, seed and index give the same trace."
)

REPORT_DESCRIPTION = (
    "Turn a trace into one self-contained HTML page (Plotly's JavaScript inlined, no network needed to "
    "open it): the addressing verdict and its reasons, the memory's volumes, the read/write trajectories "
    "and footprints, sigma and gates over time, the prediction timeline and, for occlusion, the belief "
    "through the occlusion and what the memory held. --json prints the numbers instead of (or besides) "
    "writing the page."
)


def _check_out(args: argparse.Namespace, inputs: tuple = ()) -> None:
    """``--out`` may be written: a trace store's folder must not exist, a file may be replaced with --overwrite."""
    from analysis.traces.store_writer import check_store_path, is_store_path

    if is_store_path(args.out):
        check_store_path(args.out)
    else:
        check_output_path(args.out, args.overwrite, inputs=inputs)


def _trace(args: argparse.Namespace) -> int:
    from analysis.traces.capture import capture
    from analysis.traces.store_writer import is_store_path, stored_bytes, write_store
    from tensor_memory.pretrained.checkpoint import is_pretrained_memory

    _check_out(args)
    recording = dict(
        gates=not args.no_gates,
        cell_state=not args.no_cell_state,
        volumes=args.volumes,
        progress=False if args.no_progress else None,
    )
    if is_pretrained_memory(args.checkpoint):
        trace = _minilm_trace(args, recording)
    else:
        trace = capture(
            args.checkpoint, seed=args.seed, index=args.index, **recording, device=args.device, **dict(args.param)
        )
    path = write_store(trace, args.out) if is_store_path(args.out) else trace.save(args.out)
    size = stored_bytes(path)
    sample = (
        f"task {trace.info['task']}, seed {args.seed}, index {args.index}"
        if trace.info.get("task")
        else f"test document {args.index}"
    )
    print(
        f"Trace of {trace.info['checkpoint_name']} ({sample}): {trace.num_chunks} chunks, {len(trace.layers)} "
        f"memory layer(s), {size / 1e6:.1f} MB → {path}"
    )
    return 0


def _minilm_trace(args: argparse.Namespace, recording: dict[str, Any]):
    """``trace`` of a memory-on-MiniLM checkpoint: test document ``--index`` through MiniLM and its memory."""
    from analysis.measures.pretrained import minilm_trace
    from tensor_memory.pretrained.checkpoint import load_minilm_checkpoint, require_cpu
    from tensor_memory.pretrained.recall import test_documents

    if args.param:
        raise ValueError("--param: a memory on MiniLM reads documents of its own task, which has no parameters")
    require_cpu(args.checkpoint, args.device)
    model, _, _ = load_minilm_checkpoint(args.checkpoint)
    count = test_documents(model.config)
    if not 0 <= args.index < count:
        raise ValueError(f"--index {args.index}: the test split holds documents 0 to {count - 1}")
    trace = minilm_trace(model, args.index, f"all-MiniLM-L6-v2 + {Path(args.checkpoint).resolve().name}", **recording)
    trace.info["checkpoint_name"] = Path(args.checkpoint).resolve().name
    return trace


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
    'largest change per output; --json prints {"verdict": "causal" | "leaks", "max_change", ...} '
    "with the per-position heatmap. Exit status 0 either way."
)


def _audit(args: argparse.Namespace) -> int:
    from analysis.measures.causality import audit_checkpoint
    from tensor_memory import load_checkpoint
    from tensor_memory.pretrained.checkpoint import is_pretrained_memory

    if is_pretrained_memory(args.checkpoint):
        raise ValueError(
            f"{args.checkpoint} is a memory on MiniLM, a bidirectional encoder that reads each window "
            f"whole by design: the causality audit is for causal language models; `tensor-memory eval` "
            f"and `tensor-memory trace` apply to it"
        )
    result = audit_checkpoint(load_checkpoint(args.checkpoint, device=args.device), seed=args.seed)
    if args.json:
        print(json.dumps(result))
        return 0
    print(
        f"{args.checkpoint}: {result['verdict']} (largest change of an output at or before a perturbed "
        f"position: {result['max_change']:.3g} of its RMS; tolerance {result['tolerance']:.0e})"
    )
    for name, numbers in result["outputs"].items():
        leak = "" if numbers["leak_from"] is None else f", first leaks at t = {numbers['leak_from']}"
        print(f"  {name:>10}: {numbers['max_change']:.3g}{leak}")
    if result.get("bidirectional"):
        print(
            "  (a bidirectional model, causal=False: it reads each sequence whole by design, so later inputs "
            "move earlier outputs; the audit is for causal models)"
        )
    return 0


IMPORT_DESCRIPTION = (
    "Trace a memory trained with the paper's public code (github kswain98/tensor-memory). In your own environment, "
    "save the interface's weights and an input: safetensors.torch.save_file(interface.state_dict(), "
    "'interface.safetensors') and save_file({'x': x}, 'input.safetensors') with x the token features (N, d) or "
    "(1, N, d) it reads. This command rebuilds the interface on this project's TensorMemory "
    "(TensorMemory.from_public_code: the same out, h and c), runs the input through it with recording on and "
    "writes a trace that `tensor-memory app --trace` opens. With --backbone, --weights is a whole toy backbone's "
    "state dict (save_file(model.state_dict(), 'model.safetensors'), --prefix backbone.) and --inputs the tokens it "
    "is fed: every layer is traced, the state threaded through the layers as that code does. Both files are checked "
    "and never unpickled."
)
MAX_INPUT_BYTES = 1 << 30  # an input of token features: 1 GiB is ~250M float32 numbers


def read_inputs(path: str, width: int) -> Any:
    """The one tensor (or the one named ``x``) of a safetensors file, as a (1, N, d) float tensor of finite features of
    the ``width`` the interface reads."""
    import torch

    from tensor_memory.storage.user_files import read_safetensors

    redo = "save it with safetensors.torch.save_file({'x': x}, path), x of shape (N, d) or (1, N, d)"
    stored = read_safetensors(path, MAX_INPUT_BYTES, "the input file", redo)
    names = ["x"] if "x" in stored.layout else list(stored.layout)
    if len(names) != 1:
        raise ValueError(f"{path}: holds {', '.join(sorted(stored.layout)) or 'no tensors'}; {redo}")
    x = stored.tensor(names[0]).float()
    x = x[None] if x.dim() == 2 else x
    if x.dim() != 3 or x.shape[0] != 1:
        raise ValueError(f"{path}: {names[0]!r} has shape {list(x.shape)}; {redo}")
    if x.shape[-1] != width:
        raise ValueError(
            f"{path}: {names[0]!r} holds features of width {x.shape[-1]}, but the interface in --weights "
            f"reads width {width}; save the token features it reads"
        )
    if not torch.isfinite(x).all():
        raise ValueError(f"{path}: {names[0]!r} holds NaN or infinite values; save finite token features")
    return x


def _import(args: argparse.Namespace) -> int:
    from analysis.traces.model import trace_model
    from tensor_memory import TensorMemory, memory_layers
    from tensor_memory.backbone.public_code import load_public_backbone

    _check_out(args, inputs=(args.weights, args.inputs))
    if args.backbone and args.segment is not None:
        raise ValueError("--segment: a public backbone reads its sequence whole, from a zero state; leave it out")
    try:
        if args.backbone:
            module = load_public_backbone(
                args.weights, heads=args.heads, prefix=args.prefix, sigma_scale=args.sigma_scale, causal=args.causal
            )
        else:
            module = TensorMemory.load_public_code(args.weights, prefix=args.prefix, sigma_scale=args.sigma_scale)
    except ValueError as error:
        message = str(error)
        raise ValueError(message if message.startswith(f"{args.weights}:") else f"{args.weights}: {message}") from None
    memory = next(iter(memory_layers(module).values()))
    x = read_inputs(args.inputs, memory.config.token_dim).to(memory.mix.weight.dtype)  # the weights' own precision
    segment = None if args.segment is None else args.segment * memory.config.chunk_size
    trace = trace_model(
        module,
        x,
        name=args.name or Path(args.weights).stem,
        volumes=args.volumes,
        segment=segment,
        progress=False if args.no_progress else None,
        out=args.out,
    )
    path = args.out
    print(
        f"Trace of the public-code {'backbone' if args.backbone else 'memory'} {args.weights} "
        f"({len(trace.layer_names)} layer(s), {trace.num_chunks} chunks, grid "
        f"{'×'.join(map(str, memory.config.grid))}, {memory.config.channels} channels) → {path}; "
        f"open it with `tensor-memory app --trace {path}`"
    )
    return 0


def _add_import_parser(subparsers: Any) -> None:
    command = subparsers.add_parser(
        "import", help="trace a memory trained with the paper's public code", description=IMPORT_DESCRIPTION
    )
    command.add_argument(
        "--weights",
        required=True,
        metavar="FILE",
        help="the TensorMemoryInterface's state dict as safetensors (or a whole model's, with --prefix)",
    )
    command.add_argument(
        "--inputs", required=True, metavar="FILE", help="safetensors holding the token features x, (N, d) or (1, N, d)"
    )
    command.add_argument(
        "--out",
        required=True,
        metavar="PATH",
        help="where to write the trace: FILE.safetensors (one file), or a folder such as x.trace.zarr (a trace store, "
        "written a segment at a time while recording and read lazily; for long traces)",
    )
    command.add_argument(
        "--prefix",
        default="",
        metavar="PREFIX",
        help="where the interface sits in a whole model's state dict, e.g. shared_tensor_memory. (default: none)",
    )
    command.add_argument(
        "--sigma-scale", type=float, default=1.0, help="the interface's sigma_scale constructor argument (default 1.0)"
    )
    command.add_argument(
        "--backbone",
        action="store_true",
        help="--weights is a whole public backbone's state dict: a toy TensorBackbone (toy/backbones.py; --prefix "
        "backbone. for a toy model's) or a stack of ViTBlockWithMemory (TensorMemoryViT; --prefix encoder. for the "
        "image script's PatchReconModel): every memory layer traced, the state threaded through the layers, each "
        "layer's gate as σ(γ); --inputs holds the tokens its first block is fed",
    )
    command.add_argument(
        "--heads", type=positive, default=4, help="with --backbone: its attention heads (default 4, the toy scripts')"
    )
    command.add_argument(
        "--no-causal",
        dest="causal",
        action="store_const",
        const=False,
        help="with --backbone: no causal mask, for a toy script that calls its TensorBackbone without one "
        "(toy/occlusion.py passes one; a ViTBlockWithMemory stack never has one)",
    )
    command.add_argument(
        "--segment",
        type=positive,
        metavar="CHUNKS",
        help="feed the input this many chunks at a time, the state carried (default: one pass)",
    )
    command.add_argument(
        "--name", metavar="NAME", help="the trace's name in the app (default: the weights file's name)"
    )
    command.add_argument("--volumes", choices=VOLUME_DTYPES, default="float16", help="float16 (default) or int8")
    command.add_argument("--overwrite", action="store_true", help="replace --out if it exists")
    command.add_argument("--no-progress", action="store_true", help="no progress bar")
    command.set_defaults(func=_import)


def add_trace_parsers(subparsers: Any) -> None:
    """Register ``trace``, ``report``, ``audit`` and ``import`` on ``subparsers`` (from ``parser.add_subparsers()``)."""
    trace = subparsers.add_parser(
        "trace", help="record one sample through a checkpoint into a trace file", description=TRACE_DESCRIPTION
    )
    trace.add_argument(
        "--checkpoint",
        required=True,
        type=checkpoint_folder,
        metavar="DIR",
        help="checkpoint directory (a tensor backbone)",
    )
    trace.add_argument("--seed", type=seed, default=0, help="sample stream seed (default 0)")
    trace.add_argument("--index", type=int, default=0, help="sample index within the stream (default 0)")
    trace.add_argument(
        "--out",
        required=True,
        metavar="PATH",
        help="where to write the trace: FILE.safetensors (one file), or a folder such as x.trace.zarr (a trace store, "
        "written a segment at a time while recording and read lazily; for long traces)",
    )
    trace.add_argument(
        "--param",
        type=task_param,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="override a task parameter for this sample, e.g. --param occlusion_length=6 "
        "(repeatable; only parameters that keep the model's shapes)",
    )
    trace.add_argument("--no-gates", action="store_true", help="leave out the gate volumes (a smaller file)")
    trace.add_argument("--no-cell-state", action="store_true", help="leave out the cell volume c (a smaller file)")
    trace.add_argument(
        "--volumes",
        choices=VOLUME_DTYPES,
        default="float16",
        help="how h, c and the gate volumes are stored: float16 (default), or int8 with a scale "
        "per chunk and channel — half the size, each value within 1/254 of its channel's "
        "largest magnitude in that chunk",
    )
    trace.add_argument(
        "--overwrite", action="store_true", help="replace --out if it exists (never a checkpoint's file)"
    )
    add_device_argument(trace)
    trace.add_argument("--no-progress", action="store_true", help="no progress bar")
    trace.set_defaults(func=_trace)

    report = subparsers.add_parser(
        "report", help="write an offline HTML report (or JSON numbers) for a trace", description=REPORT_DESCRIPTION
    )
    report.add_argument("--trace", required=True, metavar="FILE", help="trace file from `tensor-memory trace`")
    report.add_argument("--out", metavar="FILE.html", help="HTML report to write")
    report.add_argument(
        "--overwrite",
        action="store_true",
        help="replace --out if it exists (never the trace itself or a checkpoint's file)",
    )
    report.add_argument(
        "--json",
        action="store_true",
        help='print {"addressing": {"verdict", ...}, "gates": {...}, "predictions": {...}, "occlusion": {...}} as JSON',
    )
    report.set_defaults(func=_report)

    audit = subparsers.add_parser(
        "audit", help="check a checkpoint for leaks from future inputs (causality audit)", description=AUDIT_DESCRIPTION
    )
    audit.add_argument(
        "--checkpoint", required=True, type=checkpoint_folder, metavar="DIR", help="checkpoint directory (any backbone)"
    )
    audit.add_argument("--seed", type=seed, default=0, help="seed of the evaluation sample and the noise (default 0)")
    add_device_argument(audit)
    audit.add_argument("--json", action="store_true", help="print the whole result as one JSON object")
    audit.set_defaults(func=_audit)
    _add_import_parser(subparsers)


__all__ = ["add_trace_parsers"]
