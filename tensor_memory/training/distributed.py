"""Data parallelism: this process's place among the ranks ``torchrun`` starts, one process otherwise."""

from __future__ import annotations

import dataclasses
import os

import torch
import torch.distributed as dist


@dataclasses.dataclass
class Distributed:
    """This process's place among data-parallel ranks (a single process: rank 0 of 1)."""

    rank: int = 0
    world: int = 1

    @property
    def main(self) -> bool:
        return self.rank == 0


def init_distributed() -> Distributed:
    """Join the process group when launched by torchrun (WORLD_SIZE > 1); otherwise a single process."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Distributed()
    if not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    return Distributed(dist.get_rank(), dist.get_world_size())


__all__ = ["Distributed", "init_distributed"]
