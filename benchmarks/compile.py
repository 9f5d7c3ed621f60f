"""Does ``torch.compile`` of the memory scan help? Eager against compiled, side by side.

For each setting the same layer runs the dense update with the eager scan (``update.py``, a
hand-written backward) and with the compiled chunk step (``tensor_memory/compiled.py``, which
TorchInductor fuses and differentiates), forward+backward and forward only (streaming
inference). The script checks both give the same outputs first and reports the compile time.

    .venv/bin/python benchmarks/compile.py
"""

from __future__ import annotations

import argparse
import time

import torch
from common import alternate, fwd_bwd, machine, median_ms, table

from tensor_memory import MemoryConfig, TensorMemory
from tensor_memory.compiled import use_compiled_scan

SETTINGS = {  # name: (B, N, MemoryConfig fields)
    "diagnostic size (B=32, N=24, d=64, C=16, 6^3, chunk 1)": (32, 24, dict(token_dim=64, channels=16, grid=(6, 6, 6))),
    "language-model size (B=2, N=512, d=256, C=32, 16^3, chunk 16)":
        (2, 512, dict(token_dim=256, channels=32, grid=(16, 16, 16), chunk_size=16)),
}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    p.add_argument("--repeats", type=int, default=5, help="timed runs of each (default 5)")
    return p.parse_args()


def with_scan(compiled: bool, fn):
    def call():
        use_compiled_scan(compiled)
        try:
            return fn()
        finally:
            use_compiled_scan(False)
    return call


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    print(f"Machine: {machine(args.threads)}\n")
    rows = []
    for name, (B, N, fields) in SETTINGS.items():
        torch.manual_seed(0)
        memory = TensorMemory(MemoryConfig(**fields))
        x = torch.randn(B, N, fields["token_dim"])
        weights = torch.randn_like(x)

        train_step = fwd_bwd(memory, lambda: memory(x)[0], weights)

        def forward() -> torch.Tensor:
            with torch.no_grad():
                return memory(x)[0]

        start = time.perf_counter()
        with_scan(True, train_step)()  # compiles the step (forward and backward graphs)
        compile_s = time.perf_counter() - start
        diff = (with_scan(True, forward)() - forward()).abs().max().item()
        assert diff < 1e-4, f"compiled and eager outputs differ by {diff:.1e}"
        times = alternate({"eager train": with_scan(False, train_step), "compiled train": with_scan(True, train_step),
                           "eager forward": with_scan(False, forward), "compiled forward": with_scan(True, forward)},
                          args.repeats)
        ms = {k: median_ms(v) for k, v in times.items()}
        rows.append([name, ms["eager train"], ms["compiled train"], f"{ms['eager train'] / ms['compiled train']:.2f}x",
                     ms["eager forward"], ms["compiled forward"],
                     f"{ms['eager forward'] / ms['compiled forward']:.2f}x", f"{compile_s:.0f}", f"{diff:.1e}"])
    print(table(["setting", "eager fwd+bwd ms", "compiled fwd+bwd ms", "speed-up", "eager fwd ms",
                 "compiled fwd ms", "speed-up", "first call (compile) s", "max |Δ output|"], rows))
    print("\nspeed-up > 1 means the compiled path is faster; it stays off by default where it is not.")


if __name__ == "__main__":
    main()
