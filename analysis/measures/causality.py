"""Causality audit: does any output at position ≤ t move when only inputs after t change?

A causal model's output at t is a function of inputs 0…t alone, so perturbing the inputs after t
must leave every output at positions ≤ t *exactly* as it was. The audit measures it two ways on
one input ``x`` (B, N, d):

- **suffix perturbation**, for each audited t: replace ``x[:, t+1:]`` with fresh Gaussian noise of
  ``x``'s own spread and take the largest change of the outputs at positions ≤ t. The largest
  over all t is ``max_change``, and the verdict;
- **single-position perturbation** (the heatmap): perturb only position p and record the largest
  change of each output position q, a (P, N) map whose part q < p is zero for a causal model.

Changes are relative to the root-mean-square of the unperturbed outputs, so one tolerance fits
logits and hidden states alike. The callable may return one tensor (B, N, …), a tuple whose
first element is that tensor (``Backbone``'s ``(y, state)``), or a dict of named tensors (one
per layer): each is audited and the verdict is "leaks" if any one leaks.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch import nn

from tensor_memory.accelerator import model_device

TOLERANCE = 1e-5  # relative change above which an output counts as moved (float32 rounding is ~1e-7)
MAX_AUDITED = 32  # positions audited by default, spread evenly over the sequence


def _outputs(fn: Callable, x: torch.Tensor) -> dict[str, torch.Tensor]:
    out = fn(x)
    if isinstance(out, tuple):
        out = out[0]
    if isinstance(out, torch.Tensor):
        out = {"output": out}
    if not isinstance(out, dict) or not all(isinstance(v, torch.Tensor) for v in out.values()):
        raise ValueError(
            "causality_audit: the callable must return a tensor (B, N, ...), a tuple starting with "
            f"one, or a dict of them; got {type(out).__name__}"
        )
    for name, value in out.items():
        if value.dim() < 2 or value.shape[:2] != x.shape[:2]:
            raise ValueError(
                f"causality_audit: output {name!r} has shape {tuple(value.shape)}; expected "
                f"(B, N, ...) with B, N = {tuple(x.shape[:2])} as in the input"
            )
    return {name: value.detach().float() for name, value in out.items()}


def _per_position(change: torch.Tensor) -> torch.Tensor:
    """Largest absolute change at each position: (B, N, ...) → (N,)."""
    return change.abs().transpose(0, 1).reshape(change.shape[1], -1).amax(dim=1)


def default_positions(n: int, count: int = MAX_AUDITED) -> list[int]:
    """Up to ``count`` positions t in [0, n − 2], evenly spread (t = n − 1 has no future to perturb)."""
    if n < 2:
        return []
    last, k = n - 2, min(count, n - 1)
    return sorted({round(i * last / max(1, k - 1)) for i in range(k)})


def causality_audit(
    fn_or_module: Callable | nn.Module,
    x: torch.Tensor,
    positions: Sequence[int] | None = None,
    seed: int = 0,
    tolerance: float = TOLERANCE,
) -> dict[str, Any]:
    """Audit ``fn_or_module`` (mapping (B, N, d) → (B, N, …)) for leaks from later inputs to earlier outputs.

    Returns ``{"verdict": "causal" | "leaks", "max_change": float, "tolerance", "positions": [t …],
    "outputs": {name: {"max_change", "by_position": [change at ≤ t for each t], "leak_from": first t that
    leaks or None}}, "heatmap": {"perturbed": [p …], "output": [q …], "change": [[…]]}}`` — the heatmap for
    the first output (for a dict, its last entry: the logits when it ends with them), changes relative to
    that output's RMS. A module is run in eval mode under ``torch.no_grad`` and its mode restored.
    """
    if not isinstance(x, torch.Tensor) or x.dim() != 3 or not x.is_floating_point():
        shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
        raise ValueError(f"causality_audit: x must be a float tensor (B, N, d), got {shape}")
    if not torch.isfinite(x).all():
        raise ValueError("causality_audit: x contains NaN or infinite values")
    N = x.shape[1]
    positions = default_positions(N) if positions is None else sorted(set(int(t) for t in positions))
    if any(t < 0 or t >= N - 1 for t in positions):
        raise ValueError(f"causality_audit: positions must lie in [0, {N - 2}] (a position with inputs after it)")
    module = fn_or_module if isinstance(fn_or_module, nn.Module) else None
    was_training = module.training if module is not None else False
    if module is not None:
        module.eval()
    g = torch.Generator().manual_seed(seed)
    scale = x.std().clamp_min(1e-6)
    try:
        with torch.no_grad():
            base = _outputs(fn_or_module, x)
            rms = {name: value.pow(2).mean().sqrt().clamp_min(1e-12) for name, value in base.items()}
            by_position: dict[str, list[float]] = {name: [] for name in base}
            for t in positions:
                moved = x.clone()
                noise = torch.randn(moved[:, t + 1 :].shape, generator=g, dtype=torch.float32).to(x)
                moved[:, t + 1 :] = noise * scale
                out = _outputs(fn_or_module, moved)
                for name, value in out.items():
                    change = _per_position(value - base[name])[: t + 1].max() / rms[name]
                    by_position[name].append(float(change))
            heat_name = list(base)[-1]
            rows = []
            for p in positions:
                moved = x.clone()
                moved[:, p] = (
                    moved[:, p] + torch.randn(moved[:, p].shape, generator=g, dtype=torch.float32).to(x) * scale
                )
                value = _outputs(fn_or_module, moved)[heat_name]
                rows.append((_per_position(value - base[heat_name]) / rms[heat_name]).tolist())
    finally:
        if module is not None:
            module.train(was_training)
    outputs = {}
    for name, changes in by_position.items():
        leak_from = next((t for t, c in zip(positions, changes, strict=True) if c > tolerance), None)
        outputs[name] = {"max_change": max(changes, default=0.0), "by_position": changes, "leak_from": leak_from}
    max_change = max((o["max_change"] for o in outputs.values()), default=0.0)
    # A single-position perturbation that moves an earlier output is a leak too.
    heat_leak = max((row[q] for row, p in zip(rows, positions, strict=True) for q in range(p)), default=0.0)
    max_change = max(max_change, heat_leak)
    return {
        "verdict": "leaks" if max_change > tolerance else "causal",
        "max_change": max_change,
        "tolerance": tolerance,
        "positions": list(positions),
        "outputs": outputs,
        "heatmap": {"name": heat_name, "perturbed": list(positions), "output": list(range(N)), "change": rows},
    }


def checkpoint_audit_fn(model: nn.Module) -> Callable[[torch.Tensor], dict[str, torch.Tensor]]:
    """For a task model: token features (B, N, d) → each block's output and the logits, for the audit.

    The features are what the model's encoder gives; the audit perturbs them directly, so it needs
    no task-specific input (token ids, frames) and checks the backbone and head together.
    """
    backbone, head = model.backbone, model.head

    def run(x: torch.Tensor) -> dict[str, torch.Tensor]:
        captured: dict[str, torch.Tensor] = {}
        N = x.shape[1]

        def keep(name: str):  # a block returns (h, state); h holds any register tokens first
            return lambda _module, _inputs, out: captured.__setitem__(name, out[0][:, out[0].shape[1] - N :])

        handles = [block.register_forward_hook(keep(f"layer {i}")) for i, block in enumerate(backbone.blocks)]
        try:
            features, _ = backbone(x)
        finally:
            for handle in handles:
                handle.remove()
        return {**captured, "logits": head(features)}

    return run


def audit_checkpoint(ckpt, seed: int = 0, samples: int = 2) -> dict[str, Any]:
    """:func:`causality_audit` of a loaded checkpoint on ``samples`` evaluation samples of its task, on the device
    its model is on."""
    model, task = ckpt.model, ckpt.task
    batch = task.draw("eval", samples, seed, 0).to(model_device(model))
    with torch.no_grad():
        x = model.encoder(**batch.inputs)  # (B, N, d)
    result = causality_audit(checkpoint_audit_fn(model), x, seed=seed)
    return {
        "checkpoint": str(ckpt.path),
        "task": task.name,
        "backbone": model.backbone.config.kind,
        "share_state": model.backbone.config.share_state,
        "bidirectional": not model.backbone.config.causal,
        **result,
    }
