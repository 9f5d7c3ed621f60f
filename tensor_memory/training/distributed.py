"""Data parallelism: this process's place among the ranks ``torchrun`` starts, one process otherwise."""

from __future__ import annotations

import dataclasses
import os

import torch
import torch.distributed as dist

from ..accelerator.device import distributed_backend


@dataclasses.dataclass
class Distributed:
    """This process's place among data-parallel ranks (a single process: rank 0 of 1)."""

    rank: int = 0
    size: int = 1  # ranks in all (torchrun's WORLD_SIZE)

    @property
    def main(self) -> bool:
        return self.rank == 0


CPU = torch.device("cpu")


def init_distributed(device: torch.device = CPU) -> Distributed:
    """Join the process group when launched by torchrun (WORLD_SIZE > 1); otherwise a single process.

    Ranks on GPUs (``device`` cuda:LOCAL_RANK, from ``accelerator.rank_device``) talk over NCCL, each bound to its
    own GPU; ranks on the CPU over gloo, whether or not the machine has CUDA.
    """
    if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return Distributed()
    if device.type == "cuda":
        torch.cuda.set_device(device)  # NCCL's collectives run on the current GPU: this rank's own
    if not dist.is_initialized():
        dist.init_process_group(distributed_backend(device))
    return Distributed(dist.get_rank(), dist.get_world_size())


__all__ = ["Distributed", "init_distributed"]
