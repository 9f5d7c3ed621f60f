"""The memory layer at language-model size: dense against plain, then the windowed write and the local update.

Part 1 — d=256, C=32, grid 16³, chunk 16, B=2, N=512, forward+backward: tensor_memory's dense
layer against the plain implementation of the same maths (grouped ``nn.Conv3d``, one chunk at
a time, autograd; ``tensor_memory/memory/reference.py``), after checking they agree.

Part 2 — the write options at grids 16³ and 32³, with the writes' spread set to a given number
of voxels (the speed of the local update depends on how much of the grid a write reaches):
``dense``, ``windowed`` (the Gaussian cut to ±kσ) and ``local`` (only the cells inside that box
plus one voxel are updated), forward+backward, same weights and input. Also printed: the
windowed write's error against the dense write (largest |difference| over the largest |value|
of the write volume) and the outputs' differences.

    .venv/bin/python benchmarks/large_grid.py                 # both parts, the default settings
    .venv/bin/python benchmarks/large_grid.py --grids 16 --sigma-voxels 1
"""

from __future__ import annotations

import argparse

import torch
from common import alternate, fwd_bwd, machine, median_ms, table

from tensor_memory import MemoryConfig, TensorMemory, gaussian_write
from tensor_memory.memory.reference import ReferenceMemory


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=2, help="B (default 2)")
    p.add_argument("--tokens", type=int, default=512, help="N (default 512)")
    p.add_argument("--dim", type=int, default=256, help="d (default 256)")
    p.add_argument("--channels", type=int, default=32, help="C (default 32)")
    p.add_argument("--chunk-size", type=int, default=16, help="tokens per chunk (default 16)")
    p.add_argument("--grid", type=int, default=16, help="voxels per axis in part 1 (default 16)")
    p.add_argument("--grids", type=str, default="16,32", help="voxels per axis in part 2 (default 16,32)")
    p.add_argument(
        "--sigma-voxels", type=str, default="1,2", help="write spread σ in voxel spacings for part 2 (default 1,2)"
    )
    p.add_argument("--window-k", type=float, default=3.0, help="box half-width in σ (default 3)")
    p.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    p.add_argument("--repeats", type=int, default=5, help="timed runs of each (default 5)")
    p.add_argument("--part", choices=["1", "2", "both"], default="both", help="which part to run (default both)")
    return p.parse_args()


def layer(args, grid: int, sigma: float, mode: str = "dense", seed: int = 0) -> TensorMemory:
    """A memory layer whose writes land all over the grid with spread ≈ sigma (normalised units)."""
    torch.manual_seed(seed)
    cfg = MemoryConfig(
        token_dim=args.dim,
        channels=args.channels,
        grid=(grid,) * 3,
        chunk_size=args.chunk_size,
        sigma_init=sigma,
        sigma_min=sigma / 4,
        write={"mode": mode, "window_k": args.window_k},
    )
    memory = TensorMemory(cfg)
    with torch.no_grad():  # leave the identity initialisation so every weight matters
        memory.depthwise.add_(0.2 * torch.randn_like(memory.depthwise))
        memory.coord_head.weight.mul_(4.0)  # spread the writes over the grid
    return memory


def part_plain(args) -> None:
    memory = layer(args, args.grid, sigma=0.4)
    plain = ReferenceMemory(memory)
    x = torch.randn(args.batch, args.tokens, args.dim)
    state = memory.init_state(args.batch)
    weights = torch.randn(args.batch, args.tokens, args.dim)
    with torch.no_grad():
        diff = (memory(x, state)[0] - plain(x, state.h, state.c)[0]).abs().max().item()
    assert diff < 1e-4, f"outputs differ by {diff:.1e}"
    times = alternate(
        {
            "plain (grouped Conv3d, autograd)": fwd_bwd(plain, lambda: plain(x, state.h, state.c)[0], weights),
            "tensor_memory (dense)": fwd_bwd(memory, lambda: memory(x, state)[0], weights),
        },
        args.repeats,
    )
    medians = {name: median_ms(t) for name, t in times.items()}
    print(
        f"\n## Part 1: forward+backward, B={args.batch} N={args.tokens} d={args.dim} C={args.channels} "
        f"grid={args.grid}^3 chunk={args.chunk_size}\nmax |output difference| {diff:.1e}\n"
    )
    print(table(["implementation", "median ms", "min ms"], [[n, medians[n], min(t) * 1e3] for n, t in times.items()]))
    plain_ms, fast_ms = medians.values()
    print(f"\nspeed-up (median plain / median tensor_memory): {plain_ms / fast_ms:.2f}x")


def write_error(sigma: float, grid: int, k: float) -> float:
    """Largest |windowed − dense| of the write volume over its largest |value|, for random writes."""
    torch.manual_seed(1)
    content, xyz = torch.randn(64, 8), torch.rand(64, 3) * 2 - 1
    spread = torch.full((64,), sigma)
    dense = gaussian_write(content, xyz, spread, (grid,) * 3)
    windowed = gaussian_write(content, xyz, spread, (grid,) * 3, window=k)
    return ((windowed - dense).abs().amax() / dense.abs().amax()).item()


def part_modes(args) -> None:
    print(
        f"\n## Part 2: write options, forward+backward, B={args.batch} N={args.tokens} d={args.dim} "
        f"C={args.channels} chunk={args.chunk_size}, k={args.window_k}\n"
    )
    rows = []
    for grid in (int(g) for g in args.grids.split(",")):
        for voxels in (float(s) for s in args.sigma_voxels.split(",")):
            sigma = voxels * 2.0 / (grid - 1)  # voxel spacing is 2/(n-1) in normalised units
            modes = {mode: layer(args, grid, sigma, mode) for mode in ("dense", "windowed", "local")}
            x = torch.randn(args.batch, args.tokens, args.dim)
            weights = torch.randn_like(x)
            with torch.no_grad():
                outputs = {mode: m(x)[0] for mode, m in modes.items()}
            times = alternate(
                {mode: fwd_bwd(m, lambda m=m, x=x: m(x)[0], weights) for mode, m in modes.items()}, args.repeats
            )
            ms = {mode: median_ms(t) for mode, t in times.items()}
            rows.append(
                [
                    f"{grid}^3",
                    f"{voxels:g}",
                    ms["dense"],
                    ms["windowed"],
                    ms["local"],
                    f"{ms['dense'] / ms['windowed']:.2f}x",
                    f"{ms['dense'] / ms['local']:.2f}x",
                    f"{write_error(sigma, grid, args.window_k):.1e}",
                    f"{(outputs['windowed'] - outputs['dense']).abs().max().item():.1e}",
                    f"{(outputs['local'] - outputs['windowed']).abs().max().item():.1e}",
                ]
            )
    print(
        table(
            [
                "grid",
                "σ (voxels)",
                "dense ms",
                "windowed ms",
                "local ms",
                "windowed speed-up",
                "local speed-up",
                "write error (windowed)",
                "output Δ windowed−dense",
                "output Δ local−windowed",
            ],
            rows,
        )
    )


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    print(f"Machine: {machine(args.threads)}")
    if args.part in ("1", "both"):
        part_plain(args)
    if args.part in ("2", "both"):
        part_modes(args)


if __name__ == "__main__":
    main()
