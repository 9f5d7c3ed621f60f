"""Tensor Memory: a fixed-size recurrent 3D voxel memory for Transformers."""

from .memory import MemoryConfig, MemoryState, TensorMemory, gaussian_write, trilinear_read
from .recording import MemoryRecord, Recording, record

__all__ = ["MemoryConfig", "MemoryState", "TensorMemory", "gaussian_write", "trilinear_read",
           "MemoryRecord", "Recording", "record"]
