"""The learner across N processes (data parallel): rank 0 leads, the other ranks follow.

Rank 0 is the whole learner of one process: it alone reads Kafka, runs the planner, decides each step,
puts the weights in the object store, writes the checkpoint and announces the version, so the
one-process argument for "each trajectory trained exactly once, versions without gaps" (the checkpoint
holds the offsets, the waiting trajectories and the announcement; `learner.learner`) is unchanged. What
the other ranks add is compute: for each step rank 0 sends them the step's samples (`Step`), every rank
trains on its share (`learner.trainer.shard`) and the gradients are summed across the ranks
(`learner.trainer.sum_gradients`) before the same optimizer step on every rank, so every rank ends the
step with the same weights and optimizer state.

That sameness is checked, not assumed: after every step (and after `share` at start) each rank hashes its
trained tensors, its optimizer state and its frozen weights (`RankState`), rank 0 gathers them, and a rank
that differs stops rank 0 with `RanksDisagree` before the version is checkpointed. The checkpoint carries
the agreed list (`Leader.agreed`): one entry per rank, the proof that the one state in the file is every
rank's state.

A rank that dies takes the version in training with it: rank 0 fails (its collective breaks) or is killed
by the supervisor (`trialog worker learner --nproc N`), which restarts the whole group; the new rank 0
resumes from the last checkpoint and `share`s it with the new followers. Nothing is checkpointed that not
every rank trained, so a restart redoes at most the version in flight.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import torch

from learner.collective import Collective
from learner.step import Sample
from learner.trainer import TrainSettings, TrainStats, train_epochs

log = logging.getLogger(__name__)
# Rank 0 with nothing to train says so this often, so that a follower's wait on the command channel
# (`learner.collective.COMMAND_TIMEOUT`) only ends when rank 0 is gone or stuck.
BEAT_S = 30.0


@dataclass(frozen=True, slots=True)
class RankState:
    """One rank's state, by sha256: its trained tensors, its optimizer state, its frozen (base) weights."""

    rank: int
    trainable_sha256: str
    optimizer_sha256: str
    frozen_sha256: str

    @property
    def digests(self) -> tuple[str, str, str]:
        return self.trainable_sha256, self.optimizer_sha256, self.frozen_sha256


class RanksDisagree(RuntimeError):
    """The ranks ended a step (or the start) with different states: the version must not be kept."""


def disagreement(states: Sequence[RankState]) -> str | None:
    """What differs between the ranks' states (None: they agree), for the error."""
    first = states[0]
    differ = [s for s in states[1:] if s.digests != first.digests]
    if not differ:
        return None
    names = ("trained tensors", "optimizer state", "frozen weights")
    parts = []
    for state in differ:
        pairs = zip(names, state.digests, first.digests, strict=True)
        parts.append(f"rank {state.rank}: {', '.join(name for name, a, b in pairs if a != b)}")
    return f"the ranks' states differ from rank {first.rank}'s ({'; '.join(parts)})"


class Ranks(Protocol):
    """How the learner trains a step: in its own process (`OneRank`) or across ranks (`Leader`)."""

    @property
    def agreed(self) -> tuple[RankState, ...]:
        """Every rank's state after the last step or start (what the checkpoint records); () alone."""
        ...

    def train(
        self, model: Any, optimizer: torch.optim.Optimizer, samples: Sequence[Sample], epochs: int,
        settings: TrainSettings,
    ) -> list[TrainStats]:  # fmt: skip
        ...

    def idle(self) -> None:
        """The learner has nothing to train now."""
        ...


class OneRank:
    """The learner alone: training is `train_epochs` in this process, and there is no one to agree with."""

    @property
    def agreed(self) -> tuple[RankState, ...]:
        return ()

    def train(
        self, model: Any, optimizer: torch.optim.Optimizer, samples: Sequence[Sample], epochs: int,
        settings: TrainSettings,
    ) -> list[TrainStats]:  # fmt: skip
        return train_epochs(model, optimizer, samples, epochs, settings)

    def idle(self) -> None:
        return None


# ---- the command channel: what rank 0 tells the followers ---------------------------------------------


@dataclass(frozen=True)
class Share:
    """Take rank 0's state: its optimizer state is here, its trained tensors follow as broadcasts."""

    optimizer: dict[str, Any]


@dataclass(frozen=True)
class Step:
    """Train this step with rank 0 (the same samples on every rank, each rank its share)."""

    samples: tuple[Sample, ...]
    epochs: int
    settings: TrainSettings


@dataclass(frozen=True)
class Beat:
    """Rank 0 is alive with nothing to train."""


@dataclass(frozen=True)
class Stop:
    """Rank 0 stopped cleanly: exit."""


Command = Share | Step | Beat | Stop


class Leader:
    """Rank 0's side: what the learner (`learner.learner.Learner`) uses as its `Ranks`."""

    def __init__(self, collective: Collective, clock: Callable[[], float] = time.monotonic) -> None:
        if collective.rank != 0:
            raise ValueError(f"rank {collective.rank} cannot lead: rank 0 does")
        self.collective = collective
        self.clock = clock
        self._agreed: tuple[RankState, ...] = ()
        self._frozen: str | None = None
        self._said = clock()

    @property
    def agreed(self) -> tuple[RankState, ...]:
        return self._agreed

    def share(self, model: Any, optimizer: torch.optim.Optimizer) -> None:
        """Give every rank this rank's trained tensors and optimizer state (at start, after `resume`: the
        followers' own are a fresh initialisation), then check that all the ranks agree."""
        self._say(Share(_on_cpu(optimizer.state_dict())))
        _share_trained(model, self.collective)
        self._frozen = frozen_digest(model)
        self._agree(model, optimizer)

    def train(
        self, model: Any, optimizer: torch.optim.Optimizer, samples: Sequence[Sample], epochs: int,
        settings: TrainSettings,
    ) -> list[TrainStats]:  # fmt: skip
        if self._frozen is None:
            raise RuntimeError("share the state with the other ranks before training")
        self._say(Step(tuple(samples), epochs, settings))
        passes = train_epochs(model, optimizer, samples, epochs, settings, self.collective)
        self._agree(model, optimizer)
        return passes

    def idle(self) -> None:
        if self.clock() - self._said >= BEAT_S:
            self._say(Beat())

    def stop(self) -> None:
        """Release the followers (after a clean stop only: after a failure they are killed, since a
        follower inside a collective cannot read a command)."""
        self._say(Stop())

    def _say(self, command: Command) -> None:
        self.collective.broadcast(command)
        self._said = self.clock()

    def _agree(self, model: Any, optimizer: torch.optim.Optimizer) -> None:
        assert self._frozen is not None
        states = _gathered(self.collective, rank_state(model, optimizer, 0, self._frozen))
        problem = disagreement(states)
        if problem is not None:
            raise RanksDisagree(problem)
        self._agreed = states


def follow(model: Any, optimizer: torch.optim.Optimizer, collective: Collective) -> None:
    """A follower's life: do what rank 0 says until it says `Stop`. `model` and `optimizer` are built as
    rank 0 built its own (the same model folder, adaptation and learning rate); `Share` makes them equal."""
    frozen: str | None = None
    while True:
        command = collective.broadcast(None)
        if isinstance(command, Share):
            optimizer.load_state_dict(command.optimizer)
            _share_trained(model, collective)
            frozen = frozen_digest(model)
        elif isinstance(command, Step):
            if frozen is None:
                raise RuntimeError("rank 0 sent a step before its state")
            train_epochs(model, optimizer, command.samples, command.epochs, command.settings, collective)
        elif isinstance(command, Stop):
            return
        elif isinstance(command, Beat):
            continue
        else:
            raise TypeError(f"not a command: {command!r}")
        assert frozen is not None
        _gathered(collective, rank_state(model, optimizer, collective.rank, frozen))


def _gathered(collective: Collective, mine: RankState) -> tuple[RankState, ...]:
    states = collective.gather(mine)
    if not all(isinstance(s, RankState) for s in states):
        raise TypeError(f"a rank sent something else than its state: {states!r}")
    return tuple(s for s in states if isinstance(s, RankState))


def _share_trained(model: Any, collective: Collective) -> None:
    # The trained tensors are few (LoRA) or the whole model (rank 0): broadcast as tensors on the training
    # backend, not pickled. Parameters come in the model's own order, the same on every rank.
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.requires_grad:
                collective.broadcast_tensor(parameter.data)


def _on_cpu(state: Any) -> Any:
    """A (nested) state dict with its tensors on the CPU: a pickled GPU tensor would land on rank 0's GPU
    on every rank; `load_state_dict` moves the optimizer state to each rank's own parameters."""
    if isinstance(state, torch.Tensor):
        return state.detach().cpu()
    if isinstance(state, dict):
        return {key: _on_cpu(value) for key, value in state.items()}
    if isinstance(state, list | tuple):
        return type(state)(_on_cpu(value) for value in state)
    return state


# ---- digests --------------------------------------------------------------------------------------------


def rank_state(model: Any, optimizer: torch.optim.Optimizer, rank: int, frozen: str) -> RankState:
    """This rank's state; `frozen` is `frozen_digest(model)`, computed once (frozen weights do not change)."""
    trained = _digest((name, p) for name, p in model.named_parameters() if p.requires_grad)
    return RankState(rank, trained, optimizer_digest(optimizer), frozen)


def frozen_digest(model: Any) -> str:
    """The frozen weights (the base under LoRA; nothing with full fine-tuning): every rank must have loaded
    the same model, or its gradients are not the same function's."""
    return _digest((name, p) for name, p in model.named_parameters() if not p.requires_grad)


def optimizer_digest(optimizer: torch.optim.Optimizer) -> str:
    state = optimizer.state_dict()
    hasher = hashlib.sha256()
    for index in sorted(state["state"]):
        for key in sorted(state["state"][index]):
            value = state["state"][index][key]
            hasher.update(f"{index}.{key}=".encode())
            if isinstance(value, torch.Tensor):
                _update(hasher, value)
            else:
                hasher.update(repr(value).encode())
    hasher.update(repr(state["param_groups"]).encode())
    return hasher.hexdigest()


def _digest(tensors: Iterable[tuple[str, torch.Tensor]]) -> str:
    hasher = hashlib.sha256()
    for name, tensor in tensors:
        hasher.update(f"{name}:{tuple(tensor.shape)}:{tensor.dtype}=".encode())
        _update(hasher, tensor)
    return hasher.hexdigest()


def _update(hasher: Any, tensor: torch.Tensor) -> None:
    # The exact bits: a rank that differs in the last bit of one weight differs.
    data = tensor.detach().to("cpu").contiguous().reshape(-1).view(torch.uint8)
    hasher.update(data.numpy())
