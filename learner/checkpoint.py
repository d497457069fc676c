"""The learner's checkpoint: everything a restarted learner needs to go on as if it had never stopped.

One file holds, together: the policy version, the trained tensors (LoRA's A and B, or every parameter),
the optimizer state, the planner state (next offset per partition, the trajectories waiting in incomplete
or ready groups or held for their grader's clearance, the episodes and groups already accounted for, the
counters; not the run's control state, which is read again from `run.control`) and the announcement of
that version's weights (sent again after a crash between checkpoint and announcement). It is written to a
temporary file in the same folder, flushed to disk and renamed over the previous one: a learner killed at
any moment leaves either the old checkpoint or the new one, never a mixture. Trajectories are kept as
their Avro bytes (the codec reads old versions). A checkpoint written before a field of the planner state
existed loads with that field empty (no held trajectories, a new counter at 0).

A learner of N processes (`learner.ranks`) writes the same one file from rank 0, with `ranks`: every
rank's state digests, gathered after the step and checked equal before the file is written (data parallel
ranks hold the same state, so the file's tensors are every rank's). A one-process learner records none.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import torch

from learner.defaults import CHECKPOINT_FILE
from learner.ranks import RankState
from learner.state import Arrival, Counters, PlannerState, Position, ReadyGroup
from schemas.codec import Codec, default_codec
from schemas.publications import PolicyPublished
from schemas.trajectories import TrajectoryCompleted

FILE_NAME = CHECKPOINT_FILE
FORMAT = 1


@dataclass(frozen=True)
class Checkpoint:
    planner: PlannerState  # planner.version: the policy version these weights are
    trainable: dict[str, torch.Tensor]
    optimizer: dict[str, Any]
    published: PolicyPublished | None  # the announcement of planner.version (None: the base model)
    adaptation: str  # what was trained (e.g. "lora:8:16.0:q_proj,v_proj"); a mismatch is refused
    ranks: tuple[RankState, ...] = ()  # each rank's state when it was written (none: one process)

    @property
    def version(self) -> int:
        return self.planner.version


def save(folder: Path, checkpoint: Checkpoint, codec: Codec | None = None) -> Path:
    """Write `checkpoint` atomically as `folder/learner.ckpt`."""
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / FILE_NAME
    tmp = folder / f".{FILE_NAME}.tmp-{os.getpid()}"
    codec_ = codec or default_codec()
    payload = {
        "format": FORMAT,
        "planner": planner_to_dict(checkpoint.planner, codec_),
        "trainable": checkpoint.trainable,
        "optimizer": checkpoint.optimizer,
        "published": None if checkpoint.published is None else codec_.encode(checkpoint.published),
        "adaptation": checkpoint.adaptation,
        "ranks": [asdict(state) for state in checkpoint.ranks],
    }
    with tmp.open("wb") as out:
        torch.save(payload, out)
        out.flush()
        os.fsync(out.fileno())
    os.replace(tmp, final)
    _fsync_folder(folder)
    return final


def load(folder: Path, codec: Codec | None = None) -> Checkpoint | None:
    """The checkpoint in `folder`, or None when there is none yet."""
    path = folder / FILE_NAME
    if not path.exists():
        return None
    payload = torch.load(path, map_location="cpu", weights_only=True)
    if payload.get("format") != FORMAT:
        raise ValueError(f"{path}: checkpoint format {payload.get('format')}, expected {FORMAT}")
    codec_ = codec or default_codec()
    published = payload["published"]
    return Checkpoint(
        planner=planner_from_dict(payload["planner"], codec_),
        trainable=payload["trainable"],
        optimizer=payload["optimizer"],
        published=None if published is None else codec_.decode_as(published, PolicyPublished),
        adaptation=payload["adaptation"],
        ranks=tuple(RankState(**state) for state in payload.get("ranks", [])),
    )


def _fsync_folder(folder: Path) -> None:
    # The rename is durable only once the folder's entry is on disk.
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# ---- the planner state as plain data ----------------------------------------------------------------------


def planner_to_dict(state: PlannerState, codec: Codec) -> dict[str, Any]:
    return {
        "version": state.version,
        "offsets": [
            [topic, partition, offset] for (topic, partition), offset in sorted(state.offsets.items())
        ],
        "pending": {key: [_arrival(m, codec) for m in members] for key, members in state.pending.items()},
        "ready": [
            {
                "group_key": g.group_key,
                "members": [_arrival(m, codec) for m in g.members],
                "advantages": list(g.advantages),
                "partial": g.partial,
            }
            for g in state.ready
        ],
        "seen": sorted(state.seen),
        "closed": sorted(state.closed),
        "counters": asdict(state.counters),
        "held": [_arrival(m, codec) for m in state.held.values()],
    }


def planner_from_dict(data: dict[str, Any], codec: Codec) -> PlannerState:
    return PlannerState(
        version=data["version"],
        offsets={(topic, partition): offset for topic, partition, offset in data["offsets"]},
        pending={key: tuple(_from_arrival(m, codec) for m in ms) for key, ms in data["pending"].items()},
        ready=tuple(
            ReadyGroup(
                g["group_key"],
                tuple(_from_arrival(m, codec) for m in g["members"]),
                tuple(g["advantages"]),
                g["partial"],
            )
            for g in data["ready"]
        ),
        seen=frozenset(data["seen"]),
        closed=frozenset(data["closed"]),
        counters=Counters(**data["counters"]),
        held={held.episode_id: held for held in (_from_arrival(m, codec) for m in data.get("held", []))},
    )


def _arrival(arrival: Arrival, codec: Codec) -> dict[str, Any]:
    where = arrival.position
    return {
        "trajectory": codec.encode(arrival.trajectory),
        "topic": where.topic,
        "partition": where.partition,
        "offset": where.offset,
        "at_us": arrival.at_us,
    }


def _from_arrival(data: dict[str, Any], codec: Codec) -> Arrival:
    trajectory = codec.decode_as(data["trajectory"], TrajectoryCompleted)
    return Arrival(trajectory, Position(data["topic"], data["partition"], data["offset"]), data["at_us"])
