"""Memory layer forward+backward against its "GEMM floor", at three sizes: the layer with the fused CPU scan
(tensor_memory/memory/fused_scan.py), the same layer with the pure-PyTorch scan (TENSOR_MEMORY_FUSED_SCAN=0),
the plain implementation (reference.py) and the floor, timed alternately in one process after checking that
the three layers agree.

The floor is what no implementation of the update can avoid: per chunk, the pointwise mix's three matrix
products at their true shapes, M = B·D·H·W voxel rows — forward ``x (M, 2C+1) @ weightᵀ (2C+1, 4C)``,
backward ``grad_pre (M, 4C)ᵀ @ x`` and ``grad_pre @ mix (4C, 2C)`` — timed with torch (MKL) for every chunk.
The table's floor ratio is the layer's median over the floor's.

    .venv/bin/python benchmarks/scan_floor.py                       # toy, mid and large
    .venv/bin/python benchmarks/scan_floor.py --sizes toy --repeats 21
    .venv/bin/python benchmarks/scan_floor.py --no-plain            # without the slow plain layer
"""

from __future__ import annotations

import argparse
import copy
import os

import torch
from common import alternate, fwd_bwd, machine, median_ms, table
from memory_step import differences

from tensor_memory import MemoryConfig, TensorMemory
from tensor_memory.memory import fused_scan
from tensor_memory.memory.reference import ReferenceMemory

# name: (B, N, d, C, voxels per axis, chunk size)
SIZES = {"toy": (32, 24, 64, 16, 6, 1), "mid": (8, 64, 64, 16, 8, 4), "large": (2, 512, 256, 32, 16, 16)}


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--sizes",
        default="toy,mid,large",
        help="comma-separated, of "
        + "; ".join(f"{name} (B, N, d, C, grid, chunk) = {size}" for name, size in SIZES.items())
        + " (default all)",
    )
    p.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    p.add_argument("--repeats", type=int, default=7, help="timed runs of each (default 7)")
    p.add_argument("--no-plain", action="store_true", help="leave out the plain layer (slow at the large size)")
    return p.parse_args()


class PurePyTorch(torch.nn.Module):
    """A copy of a layer that always runs the pure-PyTorch scan (its own parameters, so gradients compare)."""

    def __init__(self, layer: TensorMemory) -> None:
        super().__init__()
        self.layer = copy.deepcopy(layer)
        self.mix = self.layer.mix  # what differences() compares

    def forward(self, *args):
        before = os.environ.get(fused_scan.SWITCH, "1")
        os.environ[fused_scan.SWITCH] = "0"
        try:
            return self.layer(*args)
        finally:
            os.environ[fused_scan.SWITCH] = before


def floor(B: int, N: int, C: int, grid: int, chunk: int):
    """The floor's matrix products for every chunk, on tensors made once."""
    M, chunks = B * grid**3, -(-N // chunk)
    x, grad_pre = torch.randn(M, 2 * C + 1), torch.randn(M, 4 * C)
    weight = torch.randn(4 * C, 2 * C + 1)
    mix = weight[:, :-1].contiguous()

    def run() -> None:
        for _ in range(chunks):
            x @ weight.t()
            grad_pre.t() @ x
            grad_pre @ mix

    return run


def one_size(name: str, args: argparse.Namespace) -> dict:
    B, N, d, C, grid, chunk = SIZES[name]
    torch.manual_seed(0)
    layer = TensorMemory(MemoryConfig(token_dim=d, channels=C, grid=(grid,) * 3, chunk_size=chunk))
    with torch.no_grad():  # leave the identity initialisation so every weight matters
        layer.depthwise.add_(0.2 * torch.randn_like(layer.depthwise))
        layer.spread.weight.normal_(0, 0.1)
    x, weights = torch.randn(B, N, d), torch.randn(B, N, d)
    others = {"pure-PyTorch scan": PurePyTorch(layer)}
    if not args.no_plain:
        others["plain"] = ReferenceMemory(layer)
    diffs = {other: differences(layer, module, x, weights) for other, module in others.items()}
    state = layer.init_state(B)
    runs = {"fused scan": fwd_bwd(layer, lambda: layer(x, state)[0], weights)}
    runs.update(
        {
            other: fwd_bwd(
                module,
                (lambda m=module: m(x, state.h, state.c)[0]) if other == "plain" else (lambda m=module: m(x, state)[0]),
                weights,
            )
            for other, module in others.items()
        }
    )
    runs["floor"] = floor(B, N, C, grid, chunk)
    return {"diffs": diffs, "times": {run: median_ms(values) for run, values in alternate(runs, args.repeats).items()}}


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    if fused_scan.kernels() is None:
        raise SystemExit("the fused scan is not built: nothing to compare")
    results = {name: one_size(name, args) for name in args.sizes.split(",")}
    print(
        f"Memory layer forward+backward against the GEMM floor; {machine(args.threads)}; "
        f"medians of {args.repeats} alternating runs"
    )
    for name, result in results.items():
        for other, found in result["diffs"].items():
            print(f"{name}: max |difference| fused vs {other}: " + ", ".join(f"{k} {v:.1e}" for k, v in found.items()))
    columns = ["fused scan", "pure-PyTorch scan"] + ([] if args.no_plain else ["plain"]) + ["floor"]
    rows = []
    for name, result in results.items():
        t = result["times"]
        rows.append(
            [f"{name} {SIZES[name]}"]
            + [t[c] for c in columns]
            + [
                f"{t['fused scan'] / t['floor']:.2f}",
                f"{t['pure-PyTorch scan'] / t['floor']:.2f}",
                f"{t['pure-PyTorch scan'] / t['fused scan']:.2f}",
            ]
        )
    print(
        table(
            ["size (B, N, d, C, grid, chunk)"]
            + [f"{c} ms" for c in columns]
            + ["floor ratio (fused / floor)", "pure-PyTorch / floor", "speed-up fused vs pure"],
            rows,
        )
    )


if __name__ == "__main__":
    main()
