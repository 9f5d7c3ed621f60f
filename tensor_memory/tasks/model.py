"""A task model: the task's encoder, a backbone, and the task's head."""

from __future__ import annotations

import torch
from torch import nn

from ..accelerator.device import model_device
from ..backbone import Backbone, BackboneConfig, BackboneState
from .base import Task


class TaskModel(nn.Module):
    """``logits, state = model(inputs, state=None)``: inputs as in ``Batch.inputs``, logits (B, N, classes).

    Inputs on another device than the weights (a batch drawn on the CPU, a model on a GPU) are moved to the weights'.
    """

    def __init__(self, task: Task, backbone: BackboneConfig) -> None:
        super().__init__()
        self.encoder = task.encoder(backbone.dim)
        self.backbone = Backbone(backbone)
        self.head = task.head(backbone.dim)

    def forward(
        self, inputs: dict[str, torch.Tensor], state: BackboneState | None = None
    ) -> tuple[torch.Tensor, BackboneState | None]:
        device = model_device(self)
        tokens = self.encoder(**{k: v.to(device, non_blocking=True) for k, v in inputs.items()})  # (B, N, dim)
        features, state = self.backbone(tokens, state)
        return self.head(features), state
