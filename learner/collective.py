"""What the learner's ranks say to each other (`Collective`), and its torch.distributed implementation.

A learner of N processes (`learner.ranks`) needs four exchanges: gradients summed across ranks and
statistics reduced (`all_reduce`, on the training backend: NCCL between GPUs, gloo on CPUs), rank 0's
trained tensors copied to every rank (`broadcast_tensor`), and two on a command channel that is always
gloo (CPU, pickled objects): rank 0's orders to the other ranks (`broadcast`) and every rank's report
back (`gather`). The command channel has its own long timeout: a follower waits there for as long as
rank 0 has nothing to train (rank 0 sends a beat now and then, `learner.ranks.BEAT_S`), while a training
collective that waits that long means a rank is lost.

`TorchCollective.join` reads the group from the environment as `torchrun` sets it (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT), which is also what `trialog worker learner --nproc N` gives its ranks.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any, Literal, Protocol

import torch

Reduction = Literal["sum", "max"]
# A training collective (a gradient all-reduce) this late means a rank is gone or stuck.
TRAINING_TIMEOUT = timedelta(minutes=30)
# Followers wait on the command channel while rank 0 has no data: beats keep it well inside this.
COMMAND_TIMEOUT = timedelta(hours=2)


class Collective(Protocol):
    """The group of ranks as one rank sees it. Every rank calls every method in the same order."""

    rank: int
    world_size: int

    def all_reduce(self, tensor: torch.Tensor, op: Reduction = "sum") -> None:
        """Replace `tensor` in place with its sum (or maximum) over the ranks: the same bits on every rank."""
        ...

    def broadcast_tensor(self, tensor: torch.Tensor) -> None:
        """Overwrite `tensor` in place with rank 0's."""
        ...

    def broadcast(self, value: object) -> object:
        """Rank 0's `value` on every rank (the others pass None): the command channel."""
        ...

    def gather(self, value: object) -> list[object]:
        """Every rank's `value`, in rank order, on every rank."""
        ...


class TorchCollective:
    """A `Collective` over torch.distributed: the default process group trains, a gloo group commands."""

    def __init__(self, commands: Any) -> None:
        import torch.distributed as dist

        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        self._commands = commands

    @classmethod
    def join(cls, backend: str) -> TorchCollective:
        """Join the group the environment names (blocks until every rank has joined)."""
        import torch.distributed as dist

        dist.init_process_group(backend=backend, init_method="env://", timeout=TRAINING_TIMEOUT)
        # Every rank creates the command group, in the same order, even on gloo (a group of its own then
        # keeps the long command timeout apart from the training one).
        return cls(dist.new_group(backend="gloo", timeout=COMMAND_TIMEOUT))

    def all_reduce(self, tensor: torch.Tensor, op: Reduction = "sum") -> None:
        import torch.distributed as dist

        dist.all_reduce(tensor, op=dist.ReduceOp.SUM if op == "sum" else dist.ReduceOp.MAX)

    def broadcast_tensor(self, tensor: torch.Tensor) -> None:
        import torch.distributed as dist

        dist.broadcast(tensor, src=0)

    def broadcast(self, value: object) -> object:
        import torch.distributed as dist

        box = [value if self.rank == 0 else None]
        dist.broadcast_object_list(box, src=0, group=self._commands)
        return box[0]

    def gather(self, value: object) -> list[object]:
        import torch.distributed as dist

        out: list[object] = [None] * self.world_size
        dist.all_gather_object(out, value, group=self._commands)
        return out

    def close(self) -> None:
        import torch.distributed as dist

        dist.destroy_process_group()
