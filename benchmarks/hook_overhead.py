"""What the hook points cost when nothing is hooked: the memory layer before and after them, one run.

"Before" is the layer as it was at commit caa3de7 (record points that only observed, checked
with one ``any(...)`` per forward), loaded from git history into a temporary package beside the
current one; "after" is today's layer, whose values pass through two-way hook points. Both get
the same weights and input; the script checks their outputs are identical, then times forward
and forward+backward alternately and prints the ratios.

    .venv/bin/python benchmarks/hook_overhead.py
    .venv/bin/python benchmarks/hook_overhead.py --help
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch
from common import alternate, fwd_bwd, layer_arguments, machine, median_ms, package_at, table

from tensor_memory import MemoryConfig, TensorMemory

BEFORE = "caa3de7"  # the last commit before the hook points


def parse_args() -> argparse.Namespace:
    return layer_arguments(__doc__.split("\n\n")[0], repeats=30).parse_args()


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    with tempfile.TemporaryDirectory() as folder:
        old = package_at(BEFORE, Path(folder), "tm_before")
        settings = dict(token_dim=args.dim, channels=args.channels, grid=(args.grid,) * 3, chunk_size=args.chunk_size)
        after = TensorMemory(MemoryConfig(**settings))
        before = old.TensorMemory(old.MemoryConfig(**settings))
        before.load_state_dict(after.state_dict())
        x = torch.randn(args.batch, args.tokens, args.dim)
        weights = torch.randn(args.batch, args.tokens, args.dim)
        with torch.no_grad():
            same = torch.equal(before(x)[0], after(x)[0])
        assert same, "the layer before and after the hook points disagree"

        def forward(layer):
            def call():
                with torch.no_grad():
                    layer(x)

            return call

        runs = {
            "before forward": forward(before),
            "after forward": forward(after),
            "before fwd+bwd": fwd_bwd(before, lambda: before(x)[0], weights),
            "after fwd+bwd": fwd_bwd(after, lambda: after(x)[0], weights),
        }
        ms = {name: median_ms(t) for name, t in alternate(runs, args.repeats, warmup=3).items()}
    print(machine(args.threads))
    print(
        f"B={args.batch}, N={args.tokens}, d={args.dim}, C={args.channels}, {args.grid}³, chunk {args.chunk_size}; "
        f"median of {args.repeats} alternating runs; outputs identical: {same}\n"
    )
    rows = [
        [what, ms[f"before {what}"], ms[f"after {what}"], f"{ms[f'after {what}'] / ms[f'before {what}']:.3f}"]
        for what in ("forward", "fwd+bwd")
    ]
    print(table(["", "before ms", "after ms", "after / before"], rows))


if __name__ == "__main__":
    main()
