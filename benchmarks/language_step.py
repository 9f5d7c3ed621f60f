"""Language modelling: one training step of each shipped language model's backbone, side by side.

Builds every backbone of ``configs/language_modelling.toml`` at its shipped size (d = 128, 4 layers,
4,096-type vocabulary, 128 tokens, batch 16) and times a full training step — the loss, backward and
AdamW's update — in turn, on the same batch of the shipped corpus. Prints each step's median and its
ratio to ``base`` (target for ``tensor``: at most 1.3x).

    .venv/bin/python benchmarks/language_step.py
    .venv/bin/python benchmarks/language_step.py --config configs/coordinate_binding.toml --kinds base tensor \
        --threads 1
    .venv/bin/python benchmarks/language_step.py --config configs/moving_digits.toml --kinds base tensor --threads 1

``--config`` times another task's shipped config the same way (a step past its address scaffold, if any);
``--set`` overrides a value of it (e.g. ``--set training.sigma_pull=0`` for moving digits without its σ pull).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from common import alternate, machine, median_ms, table

from tensor_memory.tasks import TaskModel
from tensor_memory.training import apply_overrides, load_run_config, resolve
from tensor_memory.training.loop import make_optimizer, training_loss

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "configs" / "language_modelling.toml"


def step(kind: str, config: Path = CONFIG, overrides: tuple[str, ...] = ()):
    task, backbone, cfg = resolve(apply_overrides(load_run_config(config, kind), list(overrides)))
    torch.manual_seed(0)
    model = TaskModel(task, backbone)
    optimizer = make_optimizer(model, cfg)
    batch = task.draw("train", cfg.batch_size, 0, 0)

    def call() -> None:
        loss, _ = training_loss(model, task, batch, 10_000, cfg)  # past any scaffold: the model's own addressing
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return call


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--kinds", nargs="+", default=["base", "tensor", "local", "xl", "linear"])
    p.add_argument("--config", type=Path, default=CONFIG, help=f"run config (default {CONFIG.relative_to(ROOT)})")
    p.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    p.add_argument("--repeats", type=int, default=7, help="timed steps of each (default 7)")
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="SECTION.FIELD=VALUE",
        help="override a config value for every backbone, as tensor-memory train --set does (repeatable)",
    )
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    times = alternate({kind: step(kind, args.config, tuple(args.set)) for kind in args.kinds}, args.repeats)
    base = median_ms(times["base"])
    print(f"{args.config}{''.join(f' --set {s}' for s in args.set)}: {machine(args.threads)}")
    print(
        table(
            ["backbone", "step (ms)", "vs base"],
            [[kind, median_ms(t), f"{median_ms(t) / base:.2f}x"] for kind, t in times.items()],
        )
    )


if __name__ == "__main__":
    main()
