"""Tensor Memory: a fixed-size recurrent 3D voxel memory for Transformers.

``memory/`` the mechanism · ``backbone/`` the Transformers around it · ``tasks/`` what they learn
and the data they read · ``training/`` training and evaluation · ``pretrained/`` the memory on
all-MiniLM-L6-v2 · ``storage/`` checkpoints and files, saved and loaded safely · ``accelerator/`` devices and
precision · ``cli.py`` the model's commands · ``config.py`` the configs' shared plumbing · ``limits.py`` the ceilings
on what a config or file may ask for · ``errors.py`` failures said in one line · ``shipped.py`` where the configs,
data and checkpoints that ship with the package are.
"""

from .backbone import Backbone, BackboneConfig, BackboneState, attach_memory, detach_memory
from .memory import (
    MemoryConfig,
    MemoryRecord,
    MemoryState,
    Recording,
    TensorMemory,
    gaussian_write,
    hook_points,
    hooks,
    memory_layers,
    record,
    streaming,
    trilinear_read,
)
from .storage.checkpoint import CheckpointError, load_checkpoint, save_checkpoint

__all__ = [
    "MemoryConfig",
    "MemoryState",
    "TensorMemory",
    "gaussian_write",
    "trilinear_read",
    "memory_layers",
    "Backbone",
    "BackboneConfig",
    "BackboneState",
    "attach_memory",
    "detach_memory",
    "MemoryRecord",
    "Recording",
    "record",
    "hooks",
    "hook_points",
    "load_checkpoint",
    "save_checkpoint",
    "CheckpointError",
    "streaming",
]
