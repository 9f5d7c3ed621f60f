"""The mechanism: Tensor Memory, the layer and everything that reads its inside.

``layer`` (the five steps) · ``config`` (its settings, variants grouped by step, and its state) · ``variants/`` (the
components a config chooses for a step) · ``geometry`` (voxel coordinates, the trilinear read, the Gaussian write) ·
``update`` (the ConvLSTM scan), ``fused_scan`` (its compiled CPU operator) and ``local_update`` (the scan over write
regions) · ``reference`` (the literal implementation tests and benchmarks compare with) · ``hookpoints``,
``hooking``, ``recording`` (named values on the memory path, hooks on them, recordings of them) · ``streaming``
(states carried across calls) · ``public_code`` (the paper's public interface imported) · ``measures`` (the
measures of where a layer reads and writes).
"""

from .config import MemoryConfig, MemoryState
from .geometry import gaussian_write, trilinear_read
from .hooking import hook_points, hooks
from .layer import TensorMemory, memory_layers
from .recording import MemoryRecord, Recording, record
from .streaming import Stream, streaming

__all__ = [
    "MemoryConfig",
    "MemoryState",
    "TensorMemory",
    "memory_layers",
    "trilinear_read",
    "gaussian_write",
    "hooks",
    "hook_points",
    "record",
    "Recording",
    "MemoryRecord",
    "streaming",
    "Stream",
]
