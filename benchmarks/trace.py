"""Trace capture and the addressing report: how long they take and how large a trace gets.

Three measurements in one run:

1. capture a 1,000-chunk trace of the default checkpoint (occlusion-tensor, 1,000 frames with
   gates) and write it to disk;
2. capture 100 samples of its task and compute the addressing report over them;
3. the size bound: a 1,000-chunk trace of a memory at C = 32 on a 16³ grid (an untrained model of
   that size; the size depends only on the shapes), in memory and on disk, with and without the
   cell volume c.

    .venv/bin/python benchmarks/trace.py
    .venv/bin/python benchmarks/trace.py --help
"""

from __future__ import annotations

import argparse
import platform
import tempfile
import time
from pathlib import Path

import torch

from analysis import addressing_report, capture, load_trace
from analysis.traces.capture import capture_many
from tensor_memory import BackboneConfig, MemoryConfig, load_checkpoint
from tensor_memory.storage.checkpoint import Checkpoint
from tensor_memory.tasks import TaskModel, make_task

ROOT = Path(__file__).resolve().parents[1]


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--checkpoint",
        default=str(ROOT / "checkpoints" / "occlusion-tensor"),
        help="checkpoint to trace (default checkpoints/occlusion-tensor)",
    )
    p.add_argument("--chunks", type=int, default=1000, help="chunks in the long trace (default 1000)")
    p.add_argument("--samples", type=int, default=100, help="samples for the addressing report (default 100)")
    p.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    p.add_argument("--skip-large", action="store_true", help="skip the C = 32, 16³ size measurement")
    return p.parse_args()


def timed(fn):
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def large_model(chunks: int) -> Checkpoint:
    """An untrained occlusion model whose memory is C = 32 on 16³ (the size bound's setting)."""
    task = make_task("occlusion", {"frames": chunks, "occlusion_length": 4})
    memory = MemoryConfig(token_dim=64, channels=32, grid=(16, 16, 16), chunk_size=16)
    torch.manual_seed(0)
    model = TaskModel(
        task, BackboneConfig(kind="tensor", dim=64, layers=2, heads=4, window=16, memory=memory, memory_layers=[1])
    )
    return Checkpoint(model=model.eval(), config={}, task=task, path=Path("untrained-C32-16cubed"))


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    rows = []
    ckpt = load_checkpoint(args.checkpoint)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "long.safetensors"
        trace, t_capture = timed(lambda: capture(ckpt, seed=0, frames=args.chunks, progress=True))
        _, t_save = timed(lambda: trace.save(path))
        _, t_load = timed(lambda: load_trace(path))
        rows.append(
            (
                f"capture {trace.num_chunks} chunks ({ckpt.path.name}, gates on)",
                t_capture,
                f"{trace.nbytes() / 1e6:.1f} MB in memory",
            )
        )
        rows.append(("write it", t_save, f"{path.stat().st_size / 1e6:.1f} MB on disk"))
        rows.append(("load and validate it", t_load, ""))

        traces, t_many = timed(lambda: capture_many(ckpt, seed=0, indices=range(args.samples), progress=False))
        report, t_report = timed(lambda: addressing_report(traces))
        rows.append((f"capture {args.samples} samples", t_many, ""))
        rows.append((f"addressing report over {args.samples} samples", t_report, f"verdict: {report['verdict']}"))

        if not args.skip_large:
            big = large_model(args.chunks)
            for cell_state, volumes in ((True, "float16"), (False, "float16"), (True, "int8")):
                label = f"{'h and c' if cell_state else 'h only'}, {volumes}"
                big_trace, t_big = timed(
                    lambda cell_state=cell_state, volumes=volumes: capture(
                        big, seed=0, gates=False, cell_state=cell_state, volumes=volumes, progress=True
                    )
                )
                big_path = Path(tmp) / f"big-{cell_state}-{volumes}.safetensors"
                _, t_big_save = timed(lambda big_trace=big_trace, big_path=big_path: big_trace.save(big_path))
                del big_trace
                loaded, t_big_load = timed(lambda big_path=big_path: load_trace(big_path))
                rows.append(
                    (
                        f"C=32 16³ × {loaded.num_chunks} chunks, {label}: capture",
                        t_big,
                        f"{loaded.nbytes() / 1e6:.1f} MB in memory",
                    )
                )
                rows.append(
                    (
                        f"C=32 16³ × {loaded.num_chunks} chunks, {label}: write",
                        t_big_save,
                        f"{big_path.stat().st_size / 1e6:.1f} MB on disk",
                    )
                )
                rows.append((f"C=32 16³ × {loaded.num_chunks} chunks, {label}: load", t_big_load, ""))
                del loaded
                big_path.unlink()

    print(f"\nMachine: {platform.machine()}, {torch.get_num_threads()} torch threads, torch {torch.__version__}")
    width = max(len(r[0]) for r in rows)
    print(f"{'step':<{width}}  {'seconds':>8}  notes")
    for name, seconds, note in rows:
        print(f"{name:<{width}}  {seconds:8.2f}  {note}")


if __name__ == "__main__":
    main()
