"""Ceilings on every size a config or a command-line setting can ask for, and the memory budget.

A size is checked when its config is built, so a hostile ``config.json`` (or ``--set``) is refused
in well under a second, before anything is allocated, with one line naming the field. The
ceilings sit far above what this project trains (its largest model is d = 256, C = 32 on 16³) and
below what would exhaust a 24 GiB machine. ``backbone/budget.py`` estimates what a model needs for a
batch and refuses more than :data:`MEMORY_BUDGET_BYTES`.
"""

MAX_LAYERS = 64  # blocks in a backbone
MAX_DIM = 4096  # token width d
MAX_HEADS = 256
MAX_MLP_RATIO = 16
MAX_GRID_SIDE = 256  # voxels along one axis of a memory grid
MAX_GRID_CELLS = 64**3  # voxels in one memory grid (262,144)
MAX_CHANNELS = 1024  # features per voxel C
MAX_STATE_NUMBERS = 1 << 26  # numbers in one memory layer's state per sequence (2·C·D·H·W), 256 MB in float32
MAX_SLOTS = 4096  # slots, registers
MAX_SEQUENCE = 1 << 16  # tokens in one task sample (also windows, chunks and XL segments)
MAX_TASK_ITEMS = 4096  # frames, observations, writes, queries, classes of a task
MAX_VOCAB = 1 << 20  # token types of a language model (WikiText-103 has 267,735)
MAX_BATCH = 4096  # samples in one batch (training, evaluation)
MAX_STEPS = 10_000_000  # training steps, evaluation batches
MAX_SEED = 2**63 - 1  # a seed is a signed 64-bit number (what torch.manual_seed takes)
MEMORY_BUDGET_BYTES = 16 << 30  # 16 GiB: what one model may need for a batch on this 24 GiB machine

__all__ = [
    "MAX_LAYERS",
    "MAX_DIM",
    "MAX_HEADS",
    "MAX_MLP_RATIO",
    "MAX_GRID_SIDE",
    "MAX_GRID_CELLS",
    "MAX_CHANNELS",
    "MAX_STATE_NUMBERS",
    "MAX_SLOTS",
    "MAX_SEQUENCE",
    "MAX_TASK_ITEMS",
    "MAX_VOCAB",
    "MAX_BATCH",
    "MAX_STEPS",
    "MAX_SEED",
    "MEMORY_BUDGET_BYTES",
]
