"""Optimisation: AdamW's parameter groups, the learning-rate schedule and frozen parameters."""

from __future__ import annotations

import math

import torch

from .config import TrainConfig


def learning_rate(step: int, cfg: TrainConfig) -> float:
    """Linear warm-up to ``lr``, then cosine decay to ``lr · min_lr_ratio`` at the last step."""
    if step < cfg.warmup_steps:
        return cfg.lr * (step + 1) / cfg.warmup_steps
    progress = (step - cfg.warmup_steps) / max(1, cfg.steps - cfg.warmup_steps)
    return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))


def freeze(model: torch.nn.Module, patterns: list[str]) -> None:
    """Stop training every parameter whose name contains one of ``patterns``; each must match one."""
    for pattern in patterns:
        matched = [p for name, p in model.named_parameters() if pattern in name]
        if not matched:
            raise ValueError(f"training.frozen: no parameter name contains {pattern!r}")
        for parameter in matched:
            parameter.requires_grad_(False)


COORDINATE_HEADS = ("coord_head", "read_head")  # the parameters training.coord_lr_scale applies to


def _is_coordinate_head(name: str) -> bool:
    return any(head in name for head in COORDINATE_HEADS)


def make_optimizer(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only; with ``coord_lr_scale`` ≠ 1 the coordinate heads in groups of their
    own whose ``lr_scale`` :func:`set_learning_rate` applies."""
    named = [(name, p) for name, p in model.named_parameters() if p.requires_grad]
    apart = cfg.coord_lr_scale != 1.0
    coordinates = [p for name, p in named if apart and _is_coordinate_head(name)]
    groups = _decay_groups([p for name, p in named if not (apart and _is_coordinate_head(name))], cfg)
    if coordinates:
        groups += [{**group, "lr_scale": cfg.coord_lr_scale} for group in _decay_groups(coordinates, cfg)]
    return torch.optim.AdamW(groups, lr=cfg.lr)


def _decay_groups(parameters: list, cfg: TrainConfig) -> list[dict]:
    """Matrices with weight decay, the rest (norms, biases, the memory gate γ) without."""
    return [
        {"params": [p for p in parameters if p.dim() >= 2], "weight_decay": cfg.weight_decay},
        {"params": [p for p in parameters if p.dim() < 2], "weight_decay": 0.0},
    ]


def set_learning_rate(optimizer: torch.optim.Optimizer, step: int, cfg: TrainConfig) -> None:
    """Every group at :func:`learning_rate` of ``step``, times its ``lr_scale``."""
    for group in optimizer.param_groups:
        group["lr"] = learning_rate(step, cfg) * group.get("lr_scale", 1.0)


__all__ = ["learning_rate", "set_learning_rate", "freeze", "make_optimizer", "COORDINATE_HEADS"]
