"""Training throughput: the tensor backbone against base, forward+backward, and where the time goes.

Both backbones: d=256, 4 layers, 4 heads, sequence 512, batch 8, causal. ``tensor`` is base
plus Tensor Memory (C=32, chunk 16) in the layers and at the grid given by each variant; the
script times one training step (forward, backward; no optimiser) of each, alternating, and
prints tokens per second and the ratio of step times (target: tensor within 1.3x of base).

Then a profile of the main variant: the same shapes run through each part alone —
attention and MLP sub-blocks (all layers), the memory's read (trilinear samples of every
state), its recurrent update (the scan), and the rest of the memory layer (summaries,
addressing, the Gaussian write and the read's projection: the layer's time minus read and
update) — so the table shows where a step goes.

    .venv/bin/python benchmarks/training_throughput.py
"""

from __future__ import annotations

import argparse

import torch
from common import alternate, fwd_bwd, machine, median_ms, table

from tensor_memory import Backbone, BackboneConfig, MemoryConfig
from tensor_memory.memory.geometry import sample_channels_last
from tensor_memory.memory.update import convlstm_scan

VARIANTS = {  # name: (grid, memory layers)
    "memory in 1 layer, 16^3": ((16, 16, 16), [1]),
    "memory in 1 layer, 8^3": ((8, 8, 8), [1]),
    "memory in all 4 layers, 8^3": ((8, 8, 8), None),
}
MAIN = "memory in 1 layer, 16^3"


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--batch", type=int, default=8, help="B (default 8)")
    p.add_argument("--tokens", type=int, default=512, help="sequence length (default 512)")
    p.add_argument("--dim", type=int, default=256, help="d (default 256)")
    p.add_argument("--layers", type=int, default=4, help="layers (default 4)")
    p.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    p.add_argument("--repeats", type=int, default=5, help="timed steps of each (default 5)")
    return p.parse_args()


def backbone(args, kind: str, grid=None, memory_layers=None) -> Backbone:
    torch.manual_seed(0)
    memory = None if kind == "base" else MemoryConfig(token_dim=args.dim, channels=32, grid=grid, chunk_size=16)
    return Backbone(
        BackboneConfig(
            kind=kind,
            dim=args.dim,
            layers=args.layers,
            heads=4,
            memory=memory,
            memory_layers=memory_layers if kind == "tensor" else None,
        )
    )


def profile(args, model: Backbone, x: torch.Tensor) -> list[list[object]]:
    """Forward+backward time of each part of a step, on the shapes the step gives it."""
    blocks = list(model.blocks)
    memory = next(b.memory for b in blocks if b.memory is not None)
    cfg = memory.config
    B, N, d = x.shape
    K, (D, H, W), C = N // cfg.chunk_size, cfg.grid, cfg.channels
    weights = torch.randn_like(x)
    torch.manual_seed(1)
    factors = [torch.randn(K, B, n, C, requires_grad=True) for n in (D, H, W)]
    zeros = torch.zeros(B, D, H, W, C)
    states = torch.randn(K, B, D, H, W, C, requires_grad=True)
    xyz = (torch.rand(K * B, 3) * 2 - 1).requires_grad_()

    def attention() -> torch.Tensor:
        return sum(block.attn(block.attn_norm(x), None, 0, 0)[0] for block in blocks)

    def mlp() -> torch.Tensor:
        return sum(block.feed_forward(x) for block in blocks)

    def update() -> torch.Tensor:
        hs, cs = convlstm_scan(factors, zeros, zeros, memory.depthwise[:, C:], memory.mix.weight, memory.mix.bias)
        return hs.sum() + cs.sum()

    def read() -> torch.Tensor:
        return sample_channels_last(states.view(K * B, D, H, W, C), xyz).sum()

    def whole_memory() -> torch.Tensor:
        return memory(x)[0]

    x.requires_grad_(True)
    times = alternate(
        {
            "attention": fwd_bwd(model, attention, weights),
            "MLP": fwd_bwd(model, mlp, weights),
            "memory: update (scan)": fwd_bwd(model, update, 1.0),
            "memory: read (trilinear samples)": fwd_bwd(model, read, 1.0),
            "memory layer": fwd_bwd(model, whole_memory, weights),
            "whole step": fwd_bwd(model, lambda: model(x)[0], weights),
        },
        args.repeats,
    )
    x.requires_grad_(False)
    ms = {k: median_ms(v) for k, v in times.items()}
    rest = ms["memory layer"] - ms["memory: update (scan)"] - ms["memory: read (trilinear samples)"]
    parts = [
        ("attention (all layers)", ms["attention"]),
        ("MLP (all layers)", ms["MLP"]),
        ("memory: read", ms["memory: read (trilinear samples)"]),
        ("memory: update (scan)", ms["memory: update (scan)"]),
        ("memory: write, addressing, summaries (layer − read − update)", rest),
    ]
    other = ms["whole step"] - sum(v for _, v in parts)
    parts.append(("other (norms, positions, residuals; step − parts)", other))
    return [[name, value, f"{100 * value / ms['whole step']:.0f}%"] for name, value in parts] + [
        ["whole step", ms["whole step"], "100%"]
    ]


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    print(f"Machine: {machine(args.threads)}")
    print(
        f"Training step (forward+backward), d={args.dim}, {args.layers} layers, sequence {args.tokens}, "
        f"batch {args.batch}\n"
    )
    x = torch.randn(args.batch, args.tokens, args.dim)
    weights = torch.randn_like(x)
    base = backbone(args, "base")
    models = {"base": base} | {
        name: backbone(args, "tensor", grid, layers) for name, (grid, layers) in VARIANTS.items()
    }
    times = alternate({name: fwd_bwd(m, lambda m=m: m(x)[0], weights) for name, m in models.items()}, args.repeats)
    ms = {k: median_ms(v) for k, v in times.items()}
    tokens = args.batch * args.tokens
    print(
        table(
            ["backbone", "median ms / step", "tokens/s", "time vs base"],
            [[name, ms[name], f"{tokens / ms[name] * 1e3:.0f}", f"{ms[name] / ms['base']:.2f}x"] for name in models],
        )
    )
    print(f"\ntarget: tensor within 1.3x of base's time per step — {MAIN}: {ms[MAIN] / ms['base']:.2f}x")
    print(f"\nWhere a step of the tensor backbone ({MAIN}) goes, forward+backward:\n")
    print(table(["part", "median ms", "share"], profile(args, models[MAIN], x)))


if __name__ == "__main__":
    main()
