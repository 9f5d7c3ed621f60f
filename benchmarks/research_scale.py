"""Traces at research scale: a GPT-2-small-shaped model traced over 16,384 and 131,072 tokens, opened in the explorer.

The model: GPT-2's shape (d = 768, 12 layers, 12 heads, random weights: nothing downloaded) with a Tensor Memory of
16³ × 32 after layers 2, 5, 8 and 11 (chunk 16), read 1,024 tokens a call (``segment=1024``), volumes in int8, no gates.
Each capture runs in a process of its own, which prints what it measured: the seconds, the memory the model holds
before capturing (VmRSS) and the peak above it (VmHWM − that), and the bytes written. ``--in-memory`` captures the
trace whole in memory as well (up to ``--in-memory-tokens``), the speed the store is compared with.

Then the explorer opens the store (``tensor-memory app --trace STORE``) in headless Chromium, as
``benchmarks/app_browser.py`` drives it: the first page, steps, page turns (the next page's button) and jumps (Go to
chunk), p50 and p95 over ``--moves`` each, and the server's peak memory.

    .venv/bin/python benchmarks/research_scale.py                        # 16,384 and 131,072 tokens (~40 min)
    .venv/bin/python benchmarks/research_scale.py --tokens 16384 --in-memory
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

LAYERS = [2, 5, 8, 11]
CHUNK, SEGMENT, VOCAB = 16, 1024, 50257


def status_kb(field: str) -> int:
    line = next(row for row in Path("/proc/self/status").read_text().splitlines() if row.startswith(field + ":"))
    return int(line.split()[1])


def gpt2_small_with_memories():
    """GPT-2 small's shape, random weights, a 16³ × 32 memory after layers 2, 5, 8 and 11."""
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel, logging

    from tensor_memory import MemoryConfig, attach_memory

    logging.set_verbosity_error()
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(n_embd=768, n_layer=12, n_head=12, vocab_size=VOCAB)).eval()
    config = MemoryConfig(token_dim=768, channels=32, grid=(16, 16, 16), chunk_size=CHUNK, gate_init=0.0)
    return attach_memory(model, config, layers=LAYERS)


def capture(tokens: int, out: Path | None) -> dict[str, float]:
    """One capture in this process: to the store at ``out``, or whole in memory when ``out`` is None."""
    import torch

    from analysis import trace_model
    from analysis.traces.store_writer import stored_bytes

    torch.set_num_threads(os.cpu_count() or 1)
    model = gpt2_small_with_memories()
    ids = torch.randint(0, VOCAB, (1, tokens), generator=torch.Generator().manual_seed(1))
    before = status_kb("VmRSS")
    start = time.perf_counter()
    trace = trace_model(
        model,
        {"input_ids": ids},
        targets=ids[0, 1:],
        segment=SEGMENT,
        volumes="int8",
        gates=False,
        progress=True,
        **({} if out is None else {"out": out}),
    )
    seconds = time.perf_counter() - start
    written = stored_bytes(out) if out is not None else trace.nbytes()
    return {
        "tokens": tokens,
        "chunks": trace.num_chunks,
        "seconds": seconds,
        "tokens_per_s": tokens / seconds,
        "model_gb": before * 1024 / 1e9,
        "peak_above_model_gb": (status_kb("VmHWM") - before) * 1024 / 1e9,
        "bytes": written,
    }


def captured(tokens: int, out: Path | None) -> dict[str, float]:
    """:func:`capture` in a process of its own (its peak memory is its own)."""
    command = [sys.executable, __file__, "--capture-one", str(tokens)] + ([] if out is None else ["--out", str(out)])
    done = subprocess.run(command, cwd=ROOT, stdout=subprocess.PIPE, text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def explore(store: Path, moves: int) -> None:
    """The explorer on ``store`` in headless Chromium (``benchmarks/app_browser.py``): the first page, ``moves`` steps,
    page turns and jumps, and the server's peak memory; its table printed as it is."""
    command = [sys.executable, str(ROOT / "benchmarks" / "app_browser.py"), "--trace", str(store)]
    command += ["--steps", str(moves), "--turns", str(moves), "--patience", "600"]
    subprocess.run(command, cwd=ROOT, check=True)


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--tokens", type=int, nargs="+", default=[16384, 131072], help="input lengths (default both)")
    p.add_argument("--in-memory", action="store_true", help="also capture whole in memory (the speed compared with)")
    p.add_argument("--in-memory-tokens", type=int, default=16384, help="the longest input captured in memory")
    p.add_argument("--folder", type=Path, default=ROOT / "runs" / "research_scale", help="where the stores go")
    p.add_argument("--moves", type=int, default=10, help="page turns, jumps and steps timed in the explorer")
    p.add_argument("--no-browser", action="store_true", help="captures only")
    p.add_argument("--keep", action="store_true", help="keep the stores (default: removed at the end)")
    p.add_argument("--capture-one", type=int, help=argparse.SUPPRESS)
    p.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    return p.parse_args()


def main() -> None:
    args = parse_args()
    if args.capture_one:
        print(json.dumps(capture(args.capture_one, args.out)))
        return
    print(f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f}")
    args.folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for tokens in args.tokens:
        if args.in_memory and tokens <= args.in_memory_tokens:
            rows.append(("in memory", captured(tokens, None)))
        store = args.folder / f"gpt2-small-{tokens}.trace.zarr"
        shutil.rmtree(store, ignore_errors=True)
        rows.append(("store", captured(tokens, store)))
        for how, r in rows[-2:] if args.in_memory and tokens <= args.in_memory_tokens else rows[-1:]:
            print(
                f"{tokens:>7,} tokens {how:<9}: capture {r['seconds']:7.1f} s ({r['tokens_per_s']:6.1f} tokens/s), "
                f"model {r['model_gb']:.2f} GB, peak {r['peak_above_model_gb']:.2f} GB above it, "
                f"{r['bytes'] / 1e9:.2f} GB {'on disk' if how == 'store' else 'of arrays'}",
                flush=True,
            )
        if not args.no_browser:
            explore(store, args.moves)
    if not args.keep:
        shutil.rmtree(args.folder, ignore_errors=True)


if __name__ == "__main__":
    main()
