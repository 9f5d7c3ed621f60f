"""Tensor Memory: a fixed-size recurrent 3D voxel memory for Transformers."""

from .attach import attach_memory, detach_memory
from .backbone import Backbone, BackboneConfig, BackboneState
from .checkpoint import load_checkpoint, save_checkpoint, CheckpointError
from .hookpoints import hook_points, hooks
from .memory import MemoryConfig, MemoryState, TensorMemory, gaussian_write, trilinear_read
from .recording import MemoryRecord, Recording, record

__all__ = ["MemoryConfig", "MemoryState", "TensorMemory", "gaussian_write", "trilinear_read",
           "Backbone", "BackboneConfig", "BackboneState", "attach_memory", "detach_memory",
           "MemoryRecord", "Recording", "record", "hooks", "hook_points", "load_checkpoint", "save_checkpoint", "CheckpointError"]
