"""The model layer's subcommands of ``tensor-memory``: ``demo`` and ``train`` (``eval`` is in cli_eval.py).

The command line itself is assembled above the three packages, in ``tensor_memory_cli``.
"""

from __future__ import annotations

import argparse
from typing import Any


def _demo(args: argparse.Namespace) -> int:
    import torch

    from .addressing import in_voxels
    from .memory import MemoryConfig, TensorMemory
    from .recording import record

    from .limits import MAX_SEQUENCE

    if not 1 <= args.tokens <= MAX_SEQUENCE:
        raise ValueError(f"--tokens must be an integer in [1, {MAX_SEQUENCE:,}], got {args.tokens:,}")
    torch.manual_seed(args.seed)
    cfg = MemoryConfig(token_dim=args.dim, channels=args.channels, grid=(args.grid,) * 3,
                       chunk_size=args.chunk_size)  # its checks hold --dim, --channels, --grid, --chunk-size
    memory = TensorMemory(cfg).eval()
    x = torch.randn(1, args.tokens, cfg.token_dim)
    with torch.no_grad(), record(memory) as rec:
        y, state = memory(x)
    r = rec.layers[""]
    n = args.grid

    def voxel(xyz: torch.Tensor) -> str:  # (x, y, z) in [-1, 1] → voxel indices, shown as (z, y, x)
        idx = in_voxels(xyz, cfg.grid).tolist()
        return f"(z={idx[2]:4.1f}, y={idx[1]:4.1f}, x={idx[0]:4.1f})"

    print(f"Tensor Memory, untrained, seed {args.seed}: {cfg.channels} channels on a {n}×{n}×{n} grid, "
          f"{args.tokens} random tokens of width {cfg.token_dim}, {cfg.chunk_size} per chunk.")
    print(f"σ(γ) = {memory.gate_scale.item():.3f}: the share of each read added to the tokens.\n")
    print(f"{'chunk':>5}  {'read at (voxels)':<26} {'write at (voxels)':<26} {'σ':>5}  {'|read|':>7}  {'|h|':>7}")
    for k in range(r.num_chunks):
        line = f"{k:>5}  {voxel(r.mu_read[0, k]):<26} "
        if k < r.mu_write.shape[1]:
            line += (f"{voxel(r.mu_write[0, k]):<26} {r.sigma[0, k].item():5.2f}  "
                     f"{r.read[0, k].norm().item():7.3f}  {r.h[0, k].norm().item():7.3f}")
        print(line)
    print(f"\nState after the sequence: h and c of shape {tuple(state.h.shape)} "
          f"({cfg.state_numel} numbers, whatever the sequence length); "
          f"output moved by {(y - x).norm().item() / x.norm().item():.2%} of the input.")
    return 0


def _train(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .training import apply_overrides, load_run_config, train

    config_path = Path(args.config) if args.config else Path("configs") / f"{args.task}.toml"
    if args.config or config_path.exists():
        config = load_run_config(config_path, args.backbone)
    else:  # no config file: the task's and the backbone's defaults
        config = {"task": {"name": args.task, "params": {}}, "model": {"kind": args.backbone}, "training": {}}
    if config["task"]["name"] != args.task:
        raise ValueError(f"{config_path} is for task {config['task']['name']!r}, not {args.task!r}")
    extra = [f"training.{name}={value}" for name, value in (("steps", args.steps), ("seed", args.seed))
             if value is not None]
    config = apply_overrides(config, extra + list(args.set))
    out = Path(args.out or Path("runs") / f"{args.task}-{args.backbone}")
    metrics = train(config, out, resume=args.resume, progress=not args.no_progress, overwrite=args.overwrite)
    if metrics:
        print(f"Finished: checkpoint in {out}; validation " +
              ", ".join(f"{k} {v:.4f}" for k, v in metrics.items() if isinstance(v, float)))
    return 0


def _migrate(args: argparse.Namespace) -> int:
    from .checkpoint import migrate_checkpoint

    print(f"Recorded the training configuration in {migrate_checkpoint(args.checkpoint) / 'model.safetensors'}")
    return 0


def add_model_parsers(commands: Any) -> None:
    """Add ``demo``, ``train``, ``eval`` and ``migrate`` to the ``tensor-memory`` subcommands ``commands``."""

    demo = commands.add_parser(
        "demo", help="walk a sequence through one untrained memory layer and print each chunk's step",
        description="Run random tokens through one (untrained) memory layer and print, per chunk, where it "
                    "reads and writes (in voxel indices), the write spread σ, the size of the read and of h.")
    demo.add_argument("--seed", type=int, default=0, help="random seed for weights and tokens (default 0)")
    demo.add_argument("--tokens", type=int, default=8, help="sequence length (default 8)")
    demo.add_argument("--chunk-size", type=int, default=1, help="tokens per read/write step (default 1)")
    demo.add_argument("--dim", type=int, default=32, help="token width d (default 32)")
    demo.add_argument("--channels", type=int, default=8, help="features per voxel C (default 8)")
    demo.add_argument("--grid", type=int, default=6, help="voxels per axis (default 6)")
    demo.set_defaults(func=_demo)

    from .backbone import KINDS
    from .tasks import TASKS

    train = commands.add_parser(
        "train", help="train a task model and write a checkpoint directory",
        description="Train one task with one backbone. Settings come from --config (default "
                    "configs/TASK.toml when it exists), then --steps/--seed, then --set overrides. "
                    "Writes config.json, train_log.jsonl, model.safetensors and metrics to --out. "
                    "Run on several processes with: torchrun --nproc_per_node N -m tensor_memory_cli train ...")
    train.add_argument("--task", required=True, choices=sorted(TASKS), help="the diagnostic task")
    train.add_argument("--backbone", required=True, choices=KINDS, help="the context mechanism")
    train.add_argument("--config", help="TOML run config (sections task, model, backbone.KIND, training)")
    train.add_argument("--steps", type=int, help="training steps (overrides the config)")
    train.add_argument("--seed", type=int, help="seed for initial weights and the data stream")
    train.add_argument("--out", help="output directory (default runs/TASK-BACKBONE)")
    train.add_argument("--resume", action="store_true",
                       help="continue a killed run from the last checkpoint in --out, exactly where it stopped")
    train.add_argument("--overwrite", action="store_true",
                       help="replace the run already in --out (without it, an existing run is refused)")
    train.add_argument("--set", action="append", default=[], metavar="SECTION.FIELD=VALUE",
                       help="override one setting, type-checked, e.g. --set training.lr=3e-4 "
                            "--set model.memory.channels=8 (repeatable)")
    train.add_argument("--no-progress", action="store_true", help="no progress bar")
    train.set_defaults(func=_train)

    from .cli_eval import add_eval_parser

    add_eval_parser(commands)

    migrate = commands.add_parser(
        "migrate", help="record config.json in an older checkpoint's weights file (run once, on an unedited one)",
        description="Checkpoints now record, in their weights file, the task and model they were trained with, "
                    "and a config.json that no longer matches is refused. A checkpoint saved before that has no "
                    "record: this command adds one from its config.json as it is now, leaving weights and "
                    "metrics unchanged. Run it only on a checkpoint whose config.json was not edited since "
                    "training.")
    migrate.add_argument("--checkpoint", required=True, metavar="DIR", help="the checkpoint directory")
    migrate.set_defaults(func=_migrate)
