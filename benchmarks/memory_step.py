"""Memory layer forward+backward: tensor_memory's implementation against the plain one (and, with
``--against COMMIT``, against the layer as it was at that commit).

The plain implementation (tensor_memory/memory/reference.py) is the mechanism written literally:
one chunk at a time, grid_sample for the read, the Gaussian evaluated at every voxel, grouped
nn.Conv3d for the depthwise convolutions and autograd for everything. ``--against`` loads an
earlier layer from git history (that commit's whole package) beside today's. All run
the same weights on the same input in this one process; the script first checks they agree, then
times them alternately and prints a table and the speed ratios.

    .venv/bin/python benchmarks/memory_step.py                    # the default size (DESIGN.md §9)
    .venv/bin/python benchmarks/memory_step.py --against ede4c79  # the layer before the re-layout, too
    .venv/bin/python benchmarks/memory_step.py --help             # other sizes
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch
from common import alternate, fwd_bwd, layer_arguments, machine, median_ms, package_at, table

from tensor_memory import MemoryConfig, TensorMemory
from tensor_memory.memory.reference import ReferenceMemory


def parse_args() -> argparse.Namespace:
    parser = layer_arguments(__doc__.split("\n\n")[0], repeats=7)
    parser.add_argument("--against", metavar="COMMIT", help="also time the layer of this commit (e.g. ede4c79)")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    settings = dict(token_dim=args.dim, channels=args.channels, grid=(args.grid,) * 3, chunk_size=args.chunk_size)
    fast = TensorMemory(MemoryConfig(**settings))
    with torch.no_grad():  # leave the identity initialisation so every weight matters
        fast.depthwise.add_(0.2 * torch.randn_like(fast.depthwise))
        fast.spread.weight.normal_(0, 0.1)
    x = torch.randn(args.batch, args.tokens, args.dim)
    weights = torch.randn(args.batch, args.tokens, args.dim)
    layers = {"plain (grouped Conv3d, autograd)": ReferenceMemory(fast)}
    with tempfile.TemporaryDirectory() as folder:
        if args.against:
            old = package_at(args.against, Path(folder), "tm_against")
            layers[f"tensor_memory at {args.against}"] = old.TensorMemory(old.MemoryConfig(**settings))
            layers[f"tensor_memory at {args.against}"].load_state_dict(fast.state_dict())
        layers["tensor_memory"] = fast
        diffs = {name: differences(fast, layer, x, weights) for name, layer in layers.items() if layer is not fast}
        state = fast.init_state(args.batch)
        runs = {
            name: fwd_bwd(
                layer,
                (lambda layer=layer: layer(x, state.h, state.c)[0])
                if name.startswith("plain")
                else (lambda layer=layer: layer(x, state)[0]),
                weights,
            )
            for name, layer in layers.items()
        }
        times = alternate(runs, args.repeats)
    report(args, diffs, times)


def differences(fast: TensorMemory, other: torch.nn.Module, x: torch.Tensor, weights: torch.Tensor) -> dict[str, float]:
    """The largest differences of output, final h and gradients between ``fast`` and ``other``; each must be below
    1e-5 of the compared values' own scale (at least 1): a gradient summed over many voxels carries larger
    float32 rounding than an output."""
    state = fast.init_state(x.shape[0])
    xf, xo = x.clone().requires_grad_(), x.clone().requires_grad_()
    fast.zero_grad(set_to_none=True)
    y_fast, s_fast = fast(xf, state)
    if isinstance(other, ReferenceMemory):
        y_other, (h_other, _) = other(xo, state.h, state.c)
    else:
        y_other, s_other = other(xo, state)
        h_other = s_other.h
    (y_fast * weights).sum().backward()
    (y_other * weights).sum().backward()
    pairs = {
        "output": (y_fast, y_other),
        "final h": (s_fast.h, h_other),
        "input gradient": (xf.grad, xo.grad),
        "mix gradient": (fast.mix.weight.grad, other.mix.weight.grad.flatten(1)),
    }
    diffs = {name: (a - b).abs().max().item() for name, (a, b) in pairs.items()}
    for name, (a, _) in pairs.items():
        assert diffs[name] < 1e-5 * max(1.0, a.abs().max().item()), f"{name} differs by {diffs[name]:.2e}"
    fast.zero_grad(set_to_none=True)
    return diffs


def report(args: argparse.Namespace, diffs: dict[str, dict[str, float]], times: dict[str, list[float]]) -> None:
    chunks = -(-args.tokens // args.chunk_size)
    print(
        f"Memory layer forward+backward, B={args.batch} N={args.tokens} d={args.dim} C={args.channels} "
        f"grid={args.grid}^3 chunk={args.chunk_size}; {machine(args.threads)}"
    )
    for name, found in diffs.items():
        print(f"max |difference| tensor_memory vs {name}: " + ", ".join(f"{k} {v:.1e}" for k, v in found.items()))
    medians = {name: median_ms(values) for name, values in times.items()}
    print(
        table(
            ["implementation", "median ms", "min ms", "ms/chunk"],
            [
                [name, medians[name], min(values) * 1e3, f"{medians[name] / chunks:.2f}"]
                for name, values in times.items()
            ],
        )
    )
    for name in diffs:
        print(f"speed-up (median {name} / median tensor_memory): {medians[name] / medians['tensor_memory']:.2f}x")


if __name__ == "__main__":
    main()
