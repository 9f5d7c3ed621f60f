"""Constant-memory streaming: the tensor backbone against KV caches, up to a million tokens.

Each backbone consumes one long stream segment by segment (state carried, no gradients), in
its own process so that its resident memory is its own: ``tensor`` (tensor+local: a 16-token
attention window plus Tensor Memory, d=64, 2 layers, C=16, grid 8³, chunk 16), ``base`` (a KV
cache that keeps every token) and ``xl`` (Transformer-XL, one cached segment). At each length
the script prints the process's resident memory, the bytes held by the model's state and the
tokens per second since the previous length. ``base`` slows down as its cache grows, so each
backbone stops at --time-limit seconds. Plots (PNG) of memory and throughput against length
go to --plots.

    .venv/bin/python benchmarks/streaming.py                       # to 10^6 tokens, plots in docs/img
    .venv/bin/python benchmarks/streaming.py --tokens 100000 --time-limit 60 --plots ''
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time
from pathlib import Path

from common import machine, table

KINDS = ("tensor", "base", "xl")
MB = 2**20


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", type=int, default=1_000_000, help="stream length (default 1,000,000)")
    p.add_argument("--segment", type=int, default=1000, help="tokens per forward call (default 1000)")
    p.add_argument(
        "--time-limit", type=float, default=240.0, help="seconds each backbone may stream before it stops (default 240)"
    )
    p.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    p.add_argument("--plots", default="docs/img", help="folder for the PNG plots ('' for none; default docs/img)")
    return p.parse_args()


def resident_mb() -> float:
    """This process's resident set size, from /proc (Linux)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / MB


def report_lengths(total: int, segment: int) -> list[int]:
    """10^3, 3·10^3, 10^4, … up to total, rounded to whole segments."""
    lengths, base = [], 1000
    while base <= total:
        for length in (base, 3 * base):
            if length <= total:
                lengths.append(max(segment, round(length / segment) * segment))
        base *= 10
    return sorted(set(lengths + [total // segment * segment]))


def stream(kind: str, args: argparse.Namespace, out: mp.Queue) -> None:
    """Worker: stream one backbone and put (length, rss MB, state MB, tokens/s) rows on the queue."""
    import torch

    from tensor_memory import BackboneConfig, MemoryConfig
    from tensor_memory.backbone import Backbone

    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    fields = dict(dim=64, layers=2, heads=4)
    if kind == "tensor":
        fields.update(window=16, memory=MemoryConfig(token_dim=64, channels=16, grid=(8, 8, 8), chunk_size=16))
    config = BackboneConfig(kind=kind, **fields)
    model = Backbone(config).eval()
    marks = report_lengths(args.tokens, args.segment)
    state, seen, begin = None, 0, time.perf_counter()
    last_time, last_seen = begin, 0
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        while seen < marks[-1]:
            x = torch.randn(1, args.segment, 64, generator=generator)
            _, state = model(x, state)
            seen += args.segment
            now = time.perf_counter()
            out_of_time = now - begin > args.time_limit
            if seen in marks or out_of_time:  # the length it stopped at is reported too
                out.put((kind, seen, resident_mb(), state.numel() * 4 / MB, (seen - last_seen) / (now - last_time)))
                last_time, last_seen = now, seen
            if out_of_time:
                break
    out.put((kind, None, None, None, None))


def plot(results: dict[str, list[tuple]], folder: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for column, ylabel, name in (
        (2, "model state (MB)", "streaming_memory.png"),
        (1, "process resident memory (MB)", "streaming_resident.png"),
        (3, "tokens per second", "streaming_throughput.png"),
    ):
        fig, ax = plt.subplots(figsize=(6, 4), dpi=120)
        for kind, rows in results.items():
            ax.plot([r[0] for r in rows], [r[column] for r in rows], marker="o", label=kind)
        ax.set_xscale("log")
        if column != 1:
            ax.set_yscale("log")
        ax.set_xlabel("tokens streamed")
        ax.set_ylabel(ylabel)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend()
        ax.set_title(f"Streaming: {ylabel} against length")
        fig.tight_layout()
        path = folder / name
        fig.savefig(path)
        plt.close(fig)
        paths.append(path)
    return paths


def main() -> None:
    args = parse_args()
    print(f"Machine: {machine(args.threads)}")
    print(
        f"Stream of {args.tokens:,} tokens in segments of {args.segment}, batch 1, no gradients; "
        f"each backbone stops after {args.time_limit:.0f} s.\n"
    )
    ctx = mp.get_context("spawn")
    results: dict[str, list[tuple]] = {}
    for kind in KINDS:  # one process each, one after another: resident memory and speed are its own
        queue = ctx.Queue()
        worker = ctx.Process(target=stream, args=(kind, args, queue))
        worker.start()
        rows = []
        while True:
            row = queue.get()
            if row[1] is None:
                break
            rows.append(row[1:])
            print(
                f"  {kind:>6} {row[1]:>9,} tokens  resident {row[2]:7.1f} MB  state {row[3]:8.2f} MB  "
                f"{row[4]:9.0f} tokens/s",
                flush=True,
            )
        worker.join()
        results[kind] = rows

    print()
    lengths = sorted({r[0] for rows in results.values() for r in rows})
    headers = ["tokens"] + [f"{k} {what}" for k in KINDS for what in ("resident MB", "state MB", "tokens/s")]
    by_kind = {k: {r[0]: r for r in rows} for k, rows in results.items()}
    body = []
    for n in lengths:
        row: list[object] = [f"{n:,}"]
        for k in KINDS:
            r = by_kind[k].get(n)
            row += [f"{r[1]:.1f}", f"{r[2]:.2f}", f"{r[3]:.0f}"] if r else ["—", "—", "—"]
        body.append(row)
    print(table(headers, body))

    tensor = results["tensor"]
    growth = tensor[-1][1] - tensor[0][1]
    print(
        f"\ntensor: resident memory grew {growth:+.1f} MB from {tensor[0][0]:,} to {tensor[-1][0]:,} tokens "
        f"(target < 16 MB); state {tensor[0][2]:.2f} → {tensor[-1][2]:.2f} MB; "
        f"throughput {tensor[0][3]:.0f} → {tensor[-1][3]:.0f} tokens/s"
    )
    common = max(set(by_kind["tensor"]) & set(by_kind["base"]))
    ratio = by_kind["base"][common][2] / by_kind["tensor"][common][2]
    speed = by_kind["tensor"][common][3] / by_kind["base"][common][3]
    print(
        f"at {common:,} tokens, the longest length both reached: base's KV cache holds {ratio:.1f}x the bytes of "
        f"tensor's state, and tensor streams {speed:.1f}x faster"
    )
    if args.plots:
        for path in plot(results, Path(args.plots)):
            print(f"plot: {path}")


if __name__ == "__main__":
    main()
