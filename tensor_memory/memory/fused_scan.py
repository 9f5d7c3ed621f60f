"""The ConvLSTM scan of ``update.py`` as one compiled CPU operator (``fused_scan.cpp``), and when it runs.

At one token per chunk the pure-PyTorch scan spends most of its time in ~75 small pointwise operations
per chunk (their dispatch, and a pass over memory each). The operator does a chunk in two passes around
the mix's matrix product (MKL's, through ``at::mm``): one builds ``[dw_V(V) ; dw_h(h) ; 1]``, one makes
the gates, ``c`` and ``h``; its backward is a pass of gate derivatives, the mix's two products and one
pass per sample through the write factors and the depthwise convolutions' adjoints. It keeps each chunk's
``x``, gates and ``tanh(c)`` for the backward and recomputes the convolutions' intermediate volumes.

It is compiled once per environment with torch's C++ extension tools (g++, ninja): by ``make setup``
(``python -m tensor_memory.memory.build_scan``), else on first use, into the virtual
environment's ``torch_extensions/`` (torch's file lock there lets several processes build or load it at
once). It runs when every input is float32 on the CPU; otherwise (CUDA, half precision, float64), with
``TENSOR_MEMORY_FUSED_SCAN=0``, or when it cannot be built (a one-line warning says so and how to build
it), ``update.py``'s pure-PyTorch scan runs. Both compute the same maths; ``tests/test_fused_scan.py``
holds them to each other. The operator's exp, sigmoid and tanh are its own (vectorised, a few float32
ulps from the library's), so the two agree to rounding, not bit for bit.
"""

from __future__ import annotations

import functools
import os
import sys
import warnings
from pathlib import Path

import torch

SOURCE = Path(__file__).with_name("fused_scan.cpp")
NAME = "tensor_memory_fused_scan"
SWITCH = "TENSOR_MEMORY_FUSED_SCAN"  # "0": always the pure-PyTorch scan
# No trapping maths lets the gate loops vectorise their selects; OpenMP runs at::parallel_for (torch's libgomp).
FLAGS = ["-O3", "-fno-trapping-math", "-fopenmp"]
BUILD_COMMAND = f"{sys.executable} -m tensor_memory.memory.build_scan"


def build_directory() -> Path:
    """Inside the virtual environment (ignored by git) when there is one, else in the user's cache."""
    root = Path(sys.prefix) if sys.prefix != sys.base_prefix else Path.home() / ".cache" / "tensor_memory"
    return root / "torch_extensions" / NAME


@functools.cache
def kernels():
    """The compiled operator, built first if missing; None, after one warning, when it cannot be built or loaded."""
    folder = build_directory()
    try:
        from torch.utils.cpp_extension import load

        folder.mkdir(parents=True, exist_ok=True)
        if not (folder / f"{NAME}.so").exists():
            print("tensor_memory: compiling the fused CPU scan (once; about half a minute)...", file=sys.stderr)
        return load(
            name=NAME,
            sources=[str(SOURCE)],
            build_directory=str(folder),
            extra_cflags=FLAGS,
            extra_ldflags=["-fopenmp"],
            verbose=False,
        )
    except Exception as error:  # no compiler, a build error, a library that does not load: all mean the fallback
        warnings.warn(
            f"tensor_memory: the fused CPU scan could not be built ({summary(error)}); using the slower "
            f"pure-PyTorch scan. To build it: {BUILD_COMMAND}",
            RuntimeWarning,
            stacklevel=2,
        )
        return None


def summary(error: Exception) -> str:
    """One line of a build error: the compiler's first ``error:`` line when it gave one."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()] or [type(error).__name__]
    first = next((line for line in lines if "error:" in line), lines[0])
    return first[:200]


def runs_on(tensors) -> bool:
    """Whether the fused scan takes these inputs: not switched off, all float32 on the CPU, and built."""
    if os.environ.get(SWITCH, "1") == "0":
        return False
    if any(t is not None and (t.device.type != "cpu" or t.dtype != torch.float32) for t in tensors):
        return False
    return kernels() is not None


class _FusedScan(torch.autograd.Function):
    @staticmethod
    def forward(ctx, fz, fy, fxc, h0, c0, taps_h, mix, bias, offset, dtype):
        weight = torch.cat([mix, bias[:, None]], dim=1)  # (4C, 2C+1) = [mix | bias]
        hs, cs, *kept = kernels().scan_forward(fz, fy, fxc, h0, c0, taps_h, weight, offset, dtype, True)
        ctx.has_offset, ctx.dtype = offset is not None, dtype
        ctx.save_for_backward(fz, fy, fxc, h0, c0, taps_h, mix, hs, cs, *kept)  # kept: x, gates, tanh(c) per chunk
        ctx.set_materialize_grads(False)  # an unused output's gradient stays None, not a zero-filled volume
        return hs, cs

    @staticmethod
    def backward(ctx, grad_hs, grad_cs):
        saved = ctx.saved_tensors
        with torch.autocast("cpu", enabled=False):  # the products' type is ctx.dtype's, as in the forward
            grads = kernels().scan_backward(*saved[:9], saved[9:], grad_hs, grad_cs, ctx.has_offset, ctx.dtype)
        return (*grads, None)  # the offset's gradient is None without an offset


def fused_scan(
    factors,
    h: torch.Tensor,
    c: torch.Tensor,
    taps_h: torch.Tensor,
    mix: torch.Tensor,
    bias: torch.Tensor,
    offset: torch.Tensor | None,
    dtype: torch.dtype | None,
):
    """``update.convlstm_scan`` on the operator (check :func:`runs_on` first); dtype: the mix's products' type
    under autocast, or None. Returns hs, cs (K, B, D, H, W, C)."""
    inputs = (*factors, h, c, taps_h, mix, bias, offset)
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in inputs):
        return _FusedScan.apply(*inputs, dtype)
    hs, cs = kernels().scan_forward(*inputs[:5], taps_h, torch.cat([mix, bias[:, None]], dim=1), offset, dtype, False)
    return hs, cs
