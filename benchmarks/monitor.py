"""What ``analysis.monitor`` costs a training step, beside the same loop unmonitored, in one run.

A GPT-2-shaped model (4 layers, d=128, 4 heads, 512 types, a memory of 8 channels on 6³ after layer 2), batch 4 of
64 tokens, AdamW, on the CPU. Each variant trains its own copy in blocks of steps, the blocks timed in turn
(``common.alternate``): unmonitored; every=50 without snapshots; every=50 with its default snapshots (every 500);
every=50 with a snapshot at each record; every=1. Then the reader: opening the every=1 run and one poll.

    .venv/bin/python benchmarks/monitor.py
    .venv/bin/python benchmarks/monitor.py --block 100 --repeats 3
"""

from __future__ import annotations

import argparse
import contextlib
import tempfile
import time
from pathlib import Path

import torch
from common import alternate, machine, median_ms, table
from transformers import GPT2Config, GPT2LMHeadModel
from transformers.utils import logging

from analysis import monitor
from analysis.traces.run_log import follow_run
from tensor_memory import MemoryConfig, attach_memory

VOCAB, TOKENS, BATCH = 512, 64, 4
VARIANTS = {  # name: (every, snapshot_every), None for the unmonitored loop
    "unmonitored": None,
    "every=50": (50, None),
    "every=50, snapshots every 500": (50, "auto"),
    "every=50, a snapshot each": (50, 50),
    "every=1": (1, None),
}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--block", type=int, default=50, help="training steps per timed block (default 50)")
    p.add_argument("--repeats", type=int, default=4, help="timed blocks per variant (default 4)")
    p.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    return p.parse_args()


def model() -> GPT2LMHeadModel:
    torch.manual_seed(0)
    gpt2 = GPT2LMHeadModel(GPT2Config(n_layer=4, n_embd=128, n_head=4, vocab_size=VOCAB, n_positions=TOKENS))
    memory = MemoryConfig(token_dim=128, channels=8, grid=(6, 6, 6), chunk_size=8, gate_init=0.0)
    return attach_memory(gpt2, memory, layers=[2])


class Loop:
    """One variant: its model, optimiser, monitor (or none) and step counter, trained a block at a time."""

    def __init__(self, folder: Path | None, every_and_snapshots) -> None:
        self.model, self.step = model(), 0
        self.optimiser = torch.optim.AdamW(self.model.parameters(), lr=1e-3)
        self.monitor = None
        if every_and_snapshots is not None:
            every, snapshots = every_and_snapshots
            self.monitor = monitor(self.model, folder, every=every, snapshot_every=snapshots).open()
        self.data = torch.randint(0, VOCAB, (64, BATCH, TOKENS), generator=torch.Generator().manual_seed(1))

    def steps(self, count: int) -> None:
        for _ in range(count):
            ids = self.data[self.step % len(self.data)]
            loss = self.model(input_ids=ids, labels=ids).loss
            loss.backward()
            self.optimiser.step()
            self.optimiser.zero_grad(set_to_none=True)
            if self.monitor is not None:
                self.monitor.step(self.step, loss=loss.item())
            self.step += 1


def reader_times(folder: Path) -> list[list[object]]:
    """Opening a run folder and reading all its records; then one poll after one more record."""
    start = time.perf_counter()
    follower = follow_run(folder)
    opened = time.perf_counter() - start
    history_start = time.perf_counter()
    follower.history()
    history = time.perf_counter() - history_start
    lines = (folder / "run_log.jsonl").read_bytes().splitlines(keepends=True)
    with (folder / "run_log.jsonl").open("ab") as records:
        records.write(lines[-1])
    start = time.perf_counter()
    new = follower.poll()
    polled = time.perf_counter() - start
    return [
        [f"open and read {len(follower.records) - len(new)} records", f"{opened * 1e3:.2f}"],
        ["their addressing history", f"{history * 1e3:.2f}"],
        ["poll: one new record", f"{polled * 1e3:.3f}"],
    ]


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    logging.set_verbosity_error()
    print(machine(args.threads))
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        loops = {name: Loop(Path(tmp) / str(i), v) for i, (name, v) in enumerate(VARIANTS.items())}
        for loop in loops.values():
            if loop.monitor is not None:
                stack.callback(loop.monitor.close)
            loop.steps(5)  # warm-up, and the monitor's first records
        times = alternate(
            {name: lambda loop=loop: loop.steps(args.block) for name, loop in loops.items()}, args.repeats, 0
        )
        base = median_ms(times["unmonitored"]) / args.block
        best = min(times["unmonitored"]) * 1e3 / args.block  # the fastest block: least disturbed by other work
        rows = []
        for name, values in times.items():
            per_step, fastest = median_ms(values) / args.block, min(values) * 1e3 / args.block
            rows.append(
                [name, f"{per_step:.2f}", f"{per_step / base:.3f}x", f"{fastest:.2f}", f"{fastest / best:.3f}x"]
            )
        print(f"\nA training step, {args.block}-step blocks, {args.repeats} of each (median, and the fastest):\n")
        print(table(["loop", "ms a step", "against unmonitored", "fastest", "against unmonitored"], rows))
        print("\nThe reader, on the every=1 run:\n")
        print(table(["read", "ms"], reader_times(Path(tmp) / str(list(VARIANTS).index("every=1")))))


if __name__ == "__main__":
    main()
