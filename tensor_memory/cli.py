"""The model layer's subcommands of ``tensor-memory``: ``demo``, ``train``, ``eval`` and ``migrate``.

The command line itself is assembled above the three packages, in ``tensor_memory_cli``.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from . import limits as L
from .accelerator import add_device_argument, add_precision_argument
from .shipped import checkpoint_folder

DEMO_CHUNKS = 1_024  # the demo prints one line a chunk and records every chunk's volumes


def _demo(args: argparse.Namespace) -> int:
    import torch

    from .limits import MAX_SEQUENCE
    from .memory import MemoryConfig, TensorMemory, record
    from .memory.geometry import in_voxels

    if not 1 <= args.tokens <= MAX_SEQUENCE:
        raise ValueError(f"--tokens must be an integer in [1, {MAX_SEQUENCE:,}], got {args.tokens:,}")
    if args.chunk_size >= 1 and args.tokens > DEMO_CHUNKS * args.chunk_size:  # a line (and the volumes) a chunk
        raise ValueError(
            f"--tokens {args.tokens:,} with --chunk-size {args.chunk_size} makes "
            f"{-(-args.tokens // args.chunk_size):,} chunks; the demo shows at most {DEMO_CHUNKS:,}: "
            f"lower --tokens or raise --chunk-size"
        )
    torch.manual_seed(args.seed)
    cfg = MemoryConfig(
        token_dim=args.dim, channels=args.channels, grid=(args.grid,) * 3, chunk_size=args.chunk_size
    )  # its checks hold --dim, --channels, --grid, --chunk-size
    memory = TensorMemory(cfg).eval()
    x = torch.randn(1, args.tokens, cfg.token_dim)
    with torch.no_grad(), record(memory) as rec:
        y, state = memory(x)
    r = rec.layers[""]
    n = args.grid

    def voxel(xyz: torch.Tensor) -> str:  # (x, y, z) in [-1, 1] → voxel indices, shown as (z, y, x)
        idx = in_voxels(xyz, cfg.grid).tolist()
        return f"(z={idx[2]:4.1f}, y={idx[1]:4.1f}, x={idx[0]:4.1f})"

    print(
        f"Tensor Memory, untrained, seed {args.seed}: {cfg.channels} channels on a {n}×{n}×{n} grid, "
        f"{args.tokens} random tokens of width {cfg.token_dim}, {cfg.chunk_size} per chunk."
    )
    print(f"σ(γ) = {memory.gate_scale.item():.3f}: the share of each read added to the tokens.\n")
    print(f"{'chunk':>5}  {'read at (voxels)':<26} {'write at (voxels)':<26} {'σ':>5}  {'|read|':>7}  {'|h|':>7}")
    for k in range(r.num_chunks):
        line = f"{k:>5}  {voxel(r.mu_read[0, k]):<26} "
        if k < r.mu_write.shape[1]:
            line += (
                f"{voxel(r.mu_write[0, k]):<26} {r.sigma[0, k].item():5.2f}  "
                f"{r.read[0, k].norm().item():7.3f}  {r.h[0, k].norm().item():7.3f}"
            )
        print(line)
    print(
        f"\nState after the sequence: h and c of shape {tuple(state.h.shape)} "
        f"({cfg.state_numel} numbers, whatever the sequence length); "
        f"output moved by {(y - x).norm().item() / x.norm().item():.2%} of the input."
    )
    return 0


def _train(args: argparse.Namespace) -> int:
    import warnings
    from pathlib import Path

    from .shipped import run_config
    from .training import TrainingWarning, apply_overrides, load_run_config, train

    config_path = Path(args.config) if args.config else run_config(args.task)  # the shipped one, from any folder
    if config_path is not None:
        config = load_run_config(config_path, args.backbone)
    else:  # a task that ships no config: its own and the backbone's defaults, said
        print(
            f"tensor-memory train: no configs/{args.task}.toml ships with this package; training with the task's and "
            f"the backbone's defaults (--config FILE chooses settings)",
            file=sys.stderr,
        )
        config = {"task": {"name": args.task, "params": {}}, "model": {"kind": args.backbone}, "training": {}}
    if config["task"]["name"] != args.task:
        raise ValueError(f"{config_path} is for task {config['task']['name']!r}, not {args.task!r}")
    extra = [
        f"training.{name}={value}"
        for name, value in (("steps", args.steps), ("seed", args.seed), ("precision", args.precision))
        if value is not None
    ]
    config = apply_overrides(config, extra + list(args.set))
    out = Path(args.out or Path("runs") / f"{args.task}-{args.backbone}")
    with warnings.catch_warnings():  # a setting that cannot train well: one line, once the run is under way
        warnings.simplefilter("always", TrainingWarning)
        warnings.showwarning = lambda message, *_: print(f"tensor-memory train: warning: {message}", file=sys.stderr)
        metrics = train(
            config, out, resume=args.resume, progress=not args.no_progress, overwrite=args.overwrite, device=args.device
        )
    if metrics:
        print(
            f"Finished: checkpoint in {out}; validation "
            + ", ".join(f"{k} {v:.4f}" for k, v in metrics.items() if isinstance(v, float))
        )
    return 0


def _migrate(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .pretrained.checkpoint import is_pretrained_memory, migrate_minilm
    from .storage.checkpoint import migrate_checkpoint

    migrate = migrate_minilm if is_pretrained_memory(Path(args.checkpoint)) else migrate_checkpoint
    print(
        f"Recorded the training configuration (and the files beside the weights) in "
        f"{migrate(args.checkpoint) / 'model.safetensors'}"
    )
    return 0


# ---------------------------------------------------------------------------------------
# eval
# ---------------------------------------------------------------------------------------

EVAL_DESCRIPTION = (
    "Load a checkpoint directory (model.safetensors + config.json; nothing is unpickled) and report its "
    "metrics on freshly generated batches of its task. Batch i uses the seed derived from ('eval', SEED, i), "
    "so the same seed gives the same numbers. Metrics are fractions of scored positions; 'chance' is "
    "1/classes; 'gate_drift' (memory models) is the largest change of a memory read gate sigma(gamma) "
    "from its initial value, positive when the memory's read is amplified. masked_patches reports psnr (dB) "
    "and ssim per image over the hidden pixels, their '_mean_fill' floor (hidden pixels filled with the "
    "visible mean) and mse per hidden pixel; language_modelling adds cross_entropy (nats) and perplexity; "
    "action_recognition walks the UCF-101 test list once and reports top-1 (accuracy) and top5_accuracy. A memory "
    "on MiniLM (minilm-tensor) reports its recall of earlier windows' words on the first BATCHES x BATCH_SIZE "
    "documents of the test split, in order (the seed does not apply; 8 x 64 is the 512 its metrics.json holds)."
)


def task_param(text: str) -> tuple[str, Any]:
    """``name=value`` with value parsed as JSON when it is JSON (numbers, booleans), else kept as text."""
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE, got {text!r}")
    name, value = text.split("=", 1)
    try:
        return name.strip(), json.loads(value)
    except ValueError:
        return name.strip(), value


def seed(text: str) -> int:
    """A seed flag's value: a whole number from 0 to 2^63 − 1 (what every seed of a run may be)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if not 0 <= value <= L.MAX_SEED:
        raise argparse.ArgumentTypeError(f"a seed is 0 to 2^63 − 1, got {value}")
    return value


def positive(text: str) -> int:
    """A count flag's value: a whole number of at least 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {value}")
    return value


def add_eval_parser(subparsers: Any) -> argparse.ArgumentParser:
    """Register the ``eval`` subcommand on ``subparsers`` (from ``parser.add_subparsers()``)."""
    parser = subparsers.add_parser(
        "eval", help="evaluate a checkpoint on seeded batches of its task", description=EVAL_DESCRIPTION
    )
    parser.add_argument(
        "--checkpoint",
        required=True,
        type=checkpoint_folder,
        metavar="DIR",
        help="checkpoint directory holding model.safetensors and config.json, or a shipped checkpoint's name "
        "(occlusion-tensor)",
    )
    parser.add_argument("--seed", type=seed, default=0, help="evaluation seed (default 0)")
    parser.add_argument("--batches", type=positive, default=8, help="number of batches (default 8)")
    parser.add_argument("--batch-size", type=positive, default=64, help="sequences per batch (default 64)")
    add_device_argument(parser)
    add_precision_argument(parser)
    parser.add_argument(
        "--json",
        action="store_true",
        help='print one JSON object: {"task", "backbone", "metrics"} '
        '(with --sweep: {"task", "backbone", "sweep": [{"params", "metrics"}, ...]})',
    )
    parser.add_argument(
        "--sweep",
        action="store_true",
        help="evaluate at every point of the task's parameter sweep instead of its trained setting "
        "(with --stream: the NLL over positions binned on a log scale)",
    )
    parser.add_argument(
        "--param",
        type=task_param,
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="evaluate with a task parameter changed, e.g. --param distractors=60 (repeatable; only "
        "parameters that keep the model's shapes; not with --sweep or --stream)",
    )
    parser.add_argument(
        "--distance",
        action="store_true",
        help="accuracy by how long ago each scored position's answer was shown (occlusion: frames "
        "since the ball was last seen; map_building, coordinate_binding: tokens since the "
        "cell's last glimpse or the key's write), with the memory's reads off beside it",
    )
    stream = parser.add_argument_group("streamed language modelling (language_modelling checkpoints)")
    stream.add_argument(
        "--stream",
        action="store_true",
        help="feed the test split in order, --segment tokens a call in --rows rows, and report the "
        "perplexity with the model's state carried from segment to segment, reset every "
        "segment, and carried with the memory's reads off; and the mean NLL at positions "
        "t >= W and t >= 4W (W: the attention window); the seed and batches do not apply",
    )
    stream.add_argument("--segment", type=positive, help="tokens a call (default: the trained seq_len)")
    stream.add_argument("--rows", type=positive, default=8, help="parallel rows of the stream (default 8)")
    stream.add_argument("--tokens", type=positive, help="only the first TOKENS tokens of the test split")
    parser.set_defaults(func=run_eval)
    return parser


def _fmt(metric: str, value: float | None) -> str:
    from .training import format_metric

    return "n/a" if value is None else format_metric(metric, value)


def _report(ckpt: Any, args: argparse.Namespace, result: dict, points: list[dict] | None) -> str:
    from .accelerator import model_device
    from .training.reports import text_table

    params = ", ".join(f"{k}={v}" for k, v in result.get("params", ckpt.task.config.to_dict()).items())
    head = [
        f"checkpoint  {ckpt.path}",
        f"task        {ckpt.task.name} ({params})",
        f"backbone    {ckpt.model.backbone.config.kind}",
        f"evaluation  seed {args.seed}, {args.batches} batches of {args.batch_size} "
        f"({model_device(ckpt.model)}, {args.precision})",
        "",
    ]
    if points is None:
        rows = [[metric, _fmt(metric, value)] for metric, value in result["metrics"].items()]
        return "\n".join(head) + text_table(["metric", "value"], rows)
    trained = ckpt.task.config.to_dict()  # show the parameters that vary or differ from the trained setting
    varied = [
        k for k in trained if len({json.dumps(p["params"].get(k)) for p in points} | {json.dumps(trained[k])}) > 1
    ]
    metrics = list(dict.fromkeys(m for p in points for m in p["metrics"]))
    rows = [[str(p["params"][k]) for k in varied] + [_fmt(m, p["metrics"].get(m)) for m in metrics] for p in points]
    return "\n".join(head) + text_table(varied + metrics, rows)


def _eval_minilm(args: argparse.Namespace) -> int:
    """``eval`` of a memory-on-MiniLM checkpoint: its recall on the first documents of the test split."""
    from .pretrained.checkpoint import load_minilm_checkpoint
    from .pretrained.recall import evaluate_recall, test_documents
    from .training.reports import text_table

    if args.sweep or args.stream or args.distance or args.param:
        raise ValueError(
            f"{args.checkpoint} is a memory on MiniLM, whose task has no parameters to vary, no stream "
            f"and no distances; run eval without --sweep, --param, --stream and --distance"
        )
    model, config, _ = load_minilm_checkpoint(args.checkpoint)
    documents = min(args.batches * args.batch_size, test_documents(model.config))
    metrics = evaluate_recall(model, model.config, docs=documents, batch=args.batch_size)
    backbone = "minilm" + ("+tensor" if config["memory"] else "")
    if args.json:
        print(json.dumps({"task": "minilm_recall", "backbone": backbone, "metrics": metrics}, allow_nan=False))
        return 0
    memory = f"memory after layers {config['recall']['layers']}" if config["memory"] else "no memory"
    print(
        "\n".join(
            [
                f"checkpoint  {args.checkpoint}",
                f"task        recall of earlier windows' words, all-MiniLM-L6-v2 frozen ({memory})",
                f"evaluation  the first {documents} test documents, in order (no seed)",
                "",
            ]
        )
        + text_table(
            ["metric", "value"], [[k, f"{v:.4f}" if isinstance(v, float) else str(v)] for k, v in metrics.items()]
        )
    )
    return 0


def run_eval(args: argparse.Namespace) -> int:
    from .accelerator import autocast, check_precision, resolve_device
    from .pretrained.checkpoint import is_pretrained_memory, require_cpu
    from .storage.checkpoint import CheckpointError, load_checkpoint

    try:
        device = resolve_device(args.device)
        check_precision(args.precision, device)
        if is_pretrained_memory(args.checkpoint):
            require_cpu(args.checkpoint, device, args.precision)
            return _eval_minilm(args)
        ckpt = load_checkpoint(args.checkpoint, device=device)
        with autocast(args.precision, device):  # every evaluation below in the chosen number format
            return _evaluate(ckpt, args)
    except (CheckpointError, ValueError) as error:  # one line, no traceback
        message = " ".join(str(error).split())
        print(f"tensor-memory eval: error: {message}", file=sys.stderr)
        return 2


def _evaluate(ckpt: Any, args: argparse.Namespace) -> int:
    """``eval`` of a loaded task checkpoint: the evaluation its flags choose, printed."""
    from .training import evaluate_checkpoint, sweep
    from .training.reports import eval_distance, eval_stream

    if args.stream and args.distance:
        raise ValueError("--distance and --stream are two different evaluations; give one")
    if args.param and (args.sweep or args.stream):
        raise ValueError(
            "--param sets the task of one evaluation; --sweep and --stream choose their own: give --param without them"
        )
    if args.stream:
        return eval_stream(ckpt, args)
    if args.distance:
        return eval_distance(ckpt, args)
    if args.sweep:
        points = sweep(ckpt, args.seed, args.batches, args.batch_size)
        result = {"task": ckpt.task.name, "backbone": ckpt.model.backbone.config.kind, "sweep": points}
    else:
        points = None
        full = evaluate_checkpoint(ckpt, args.seed, args.batches, args.batch_size, task_params=dict(args.param) or None)
        result = {
            "task": full["task"],
            "backbone": full["backbone"],
            "metrics": full["metrics"],
            **({"params": full["params"]} if args.param else {}),
        }
    if args.json:
        print(json.dumps(result, allow_nan=False))
    else:
        print(_report(ckpt, args, result, points))
    return 0


def add_model_parsers(commands: Any) -> None:
    """Add ``demo``, ``train``, ``eval`` and ``migrate`` to the ``tensor-memory`` subcommands ``commands``."""

    demo = commands.add_parser(
        "demo",
        help="walk a sequence through one untrained memory layer and print each chunk's step",
        description="Run random tokens through one (untrained) memory layer and print, per chunk, where it "
        "reads and writes (in voxel indices), the write spread σ, the size of the read and of h.",
    )
    demo.add_argument("--seed", type=seed, default=0, help="random seed for weights and tokens (default 0)")
    demo.add_argument("--tokens", type=int, default=8, help="sequence length (default 8)")
    demo.add_argument("--chunk-size", type=int, default=1, help="tokens per read/write step (default 1)")
    demo.add_argument("--dim", type=int, default=32, help="token width d (default 32)")
    demo.add_argument("--channels", type=int, default=8, help="features per voxel C (default 8)")
    demo.add_argument("--grid", type=int, default=6, help="voxels per axis (default 6)")
    demo.set_defaults(func=_demo)

    from .backbone import KINDS
    from .tasks import TASKS

    train = commands.add_parser(
        "train",
        help="train a task model and write a checkpoint directory",
        description="Train one task with one backbone. Settings come from --config (default: the "
        "configs/TASK.toml shipped with the package, read from any folder), then --steps/--seed, then --set "
        "overrides. "
        "Writes config.json, train_log.jsonl, model.safetensors and metrics to --out. "
        "Run on several processes with: torchrun --nproc_per_node N -m tensor_memory_cli train ... "
        "(each process on its own GPU, cuda:LOCAL_RANK, over NCCL; on the CPU over gloo).",
    )
    train.add_argument("--task", required=True, choices=sorted(TASKS), help="the diagnostic task")
    train.add_argument("--backbone", required=True, choices=KINDS, help="the context mechanism")
    train.add_argument(
        "--config", metavar="FILE", help="TOML run config (sections task, model, backbone.KIND, training)"
    )
    train.add_argument("--steps", type=int, help="training steps (overrides the config)")
    train.add_argument("--seed", type=seed, help="seed for initial weights and the data stream")
    train.add_argument("--out", metavar="DIR", help="output directory (default runs/TASK-BACKBONE)")
    train.add_argument(
        "--resume",
        action="store_true",
        help="continue a killed run from the last checkpoint in --out, exactly where it stopped",
    )
    train.add_argument(
        "--overwrite",
        action="store_true",
        help="replace the run already in --out (without it, an existing run is refused)",
    )
    train.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.FIELD=VALUE",
        help="override one setting, type-checked, e.g. --set training.lr=3e-4 "
        "--set model.memory.channels=8 (repeatable)",
    )
    add_device_argument(train)
    add_precision_argument(train, default=None)
    train.add_argument("--no-progress", action="store_true", help="no progress bar")
    train.set_defaults(func=_train)

    add_eval_parser(commands)

    migrate = commands.add_parser(
        "migrate",
        help="record config.json in an older checkpoint's weights file (run once, on an unedited one)",
        description="Checkpoints now record, in their weights file, the task and model they were trained with, "
        "and a config.json that no longer matches is refused. A checkpoint saved before that has no "
        "record: this command adds one from its config.json as it is now, leaving weights and "
        "metrics unchanged. Run it only on a checkpoint whose config.json was not edited since "
        "training.",
    )
    migrate.add_argument("--checkpoint", required=True, metavar="DIR", help="the checkpoint directory")
    migrate.set_defaults(func=_migrate)


__all__ = ["add_model_parsers", "add_eval_parser", "run_eval", "seed", "positive", "task_param"]
