"""Memory layer forward+backward: tensor_memory's implementation against the plain one.

The plain implementation (tensor_memory/reference.py) is the mechanism written literally:
one chunk at a time, grid_sample for the read, the Gaussian evaluated at every voxel, grouped
nn.Conv3d for the depthwise convolutions and autograd for everything. Both run the same
weights on the same input in this one process; the script first checks they agree, then
times them alternately and prints a table and the speed ratio.

    .venv/bin/python benchmarks/memory_step.py            # the issue's setting
    .venv/bin/python benchmarks/memory_step.py --help     # other sizes
"""

from __future__ import annotations

import argparse

import torch
from common import alternate, fwd_bwd, layer_arguments, machine, median_ms, table

from tensor_memory import MemoryConfig, TensorMemory
from tensor_memory.reference import ReferenceMemory


def parse_args() -> argparse.Namespace:
    return layer_arguments(__doc__.split("\n\n")[0], repeats=7).parse_args()


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    cfg = MemoryConfig(token_dim=args.dim, channels=args.channels, grid=(args.grid,) * 3,
                       chunk_size=args.chunk_size)
    fast = TensorMemory(cfg)
    with torch.no_grad():  # leave the identity initialisation so every weight matters
        fast.depthwise.add_(0.2 * torch.randn_like(fast.depthwise))
        fast.spread.weight.normal_(0, 0.1)
    plain = ReferenceMemory(fast)
    x = torch.randn(args.batch, args.tokens, args.dim)
    state = fast.init_state(args.batch)

    # Same outputs and gradients first.
    xf, xp = x.clone().requires_grad_(), x.clone().requires_grad_()
    y_fast, s_fast = fast(xf, state)
    y_plain, (h_plain, _) = plain(xp, state.h, state.c)
    weights = torch.randn_like(y_fast)
    (y_fast * weights).sum().backward()
    (y_plain * weights).sum().backward()
    diffs = {"output": (y_fast - y_plain).abs().max().item(),
             "final h": (s_fast.h - h_plain).abs().max().item(),
             "input gradient": (xf.grad - xp.grad).abs().max().item(),
             "mix gradient": (fast.mix.weight.grad - plain.mix.weight.grad.flatten(1)).abs().max().item()}
    for name, diff in diffs.items():
        assert diff < 1e-5, f"{name} differs by {diff:.2e}"

    times = alternate({"plain (grouped Conv3d, autograd)": fwd_bwd(plain, lambda: plain(x, state.h, state.c)[0], weights),
                       "tensor_memory": fwd_bwd(fast, lambda: fast(x, state)[0], weights)}, args.repeats)

    chunks = -(-args.tokens // args.chunk_size)
    print(f"Memory layer forward+backward, B={args.batch} N={args.tokens} d={args.dim} C={args.channels} "
          f"grid={args.grid}^3 chunk={args.chunk_size}; {machine(args.threads)}")
    print("max |difference| fast vs plain: " + ", ".join(f"{k} {v:.1e}" for k, v in diffs.items()))
    medians = {name: median_ms(values) for name, values in times.items()}
    print(table(["implementation", "median ms", "min ms", "ms/chunk"],
                [[name, medians[name], min(values) * 1e3, f"{medians[name] / chunks:.2f}"]
                 for name, values in times.items()]))
    plain_ms, fast_ms = medians.values()
    print(f"speed-up (median plain / median tensor_memory): {plain_ms / fast_ms:.2f}x")


if __name__ == "__main__":
    main()
