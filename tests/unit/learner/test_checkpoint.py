from __future__ import annotations

import dataclasses
from pathlib import Path

import torch

from learner import checkpoint, testing
from learner.state import Arrival, PlannerConfig, PlannerState, Position, apply
from schemas.blobs import BlobRef
from schemas.codec import default_codec
from schemas.common import Producer, RecordMeta
from schemas.publications import PolicyPublished

TOPIC = "r.trajectories.completed"


def planner_with_waiting_groups() -> PlannerState:
    config = PlannerConfig(group_size=2)
    state = PlannerState()
    arrivals = [*testing.group("ready", [1.0, 0.0]), testing.trajectory(episode_id="p", group_id="pending")]
    for offset, trajectory in enumerate(arrivals):
        state, _ = apply(
            state, Arrival(trajectory, Position(TOPIC, offset % 2, offset), 1000 + offset), config
        )
    return state


def a_checkpoint(version: int = 3) -> checkpoint.Checkpoint:
    planner = planner_with_waiting_groups()
    planner = PlannerState(
        version,
        planner.offsets,
        planner.pending,
        planner.ready,
        planner.seen,
        planner.closed,
        planner.counters,
    )
    published = PolicyPublished(
        RecordMeta("id-1", 1, Producer("learner", "l0")), "r", version, version - 1, "sha256:ab",
        BlobRef("ab" * 32, 10), 2,
    )  # fmt: skip
    return checkpoint.Checkpoint(
        planner=planner,
        trainable={"a": torch.arange(6.0).reshape(2, 3), "b": torch.ones(3)},
        optimizer={"state": {0: {"step": torch.tensor(4.0)}}, "param_groups": [{"lr": 0.1, "params": [0]}]},
        published=published,
        adaptation="lora:8:16.0:q_proj,v_proj",
    )


def test_a_checkpoint_round_trips_with_its_waiting_trajectories(tmp_path: Path) -> None:
    saved = a_checkpoint()
    assert saved.planner.waiting == 3
    checkpoint.save(tmp_path, saved)
    loaded = checkpoint.load(tmp_path)
    assert loaded is not None
    assert loaded.planner == saved.planner
    assert loaded.published == saved.published
    assert loaded.adaptation == saved.adaptation
    assert set(loaded.trainable) == {"a", "b"}
    assert all(torch.equal(loaded.trainable[k], saved.trainable[k]) for k in saved.trainable)
    assert loaded.optimizer["param_groups"] == saved.optimizer["param_groups"]
    assert torch.equal(loaded.optimizer["state"][0]["step"], torch.tensor(4.0))


def test_there_is_no_checkpoint_before_the_first(tmp_path: Path) -> None:
    assert checkpoint.load(tmp_path) is None


def test_a_write_interrupted_before_its_rename_leaves_the_previous_checkpoint(tmp_path: Path) -> None:
    checkpoint.save(tmp_path, a_checkpoint(version=3))
    # A learner killed while writing version 4 leaves a partial temporary file and nothing else.
    (tmp_path / f".{checkpoint.FILE_NAME}.tmp-99999").write_bytes(b"\x80half a pickle")
    loaded = checkpoint.load(tmp_path)
    assert loaded is not None and loaded.version == 3
    checkpoint.save(tmp_path, a_checkpoint(version=4))
    loaded = checkpoint.load(tmp_path)
    assert loaded is not None and loaded.version == 4
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == [checkpoint.FILE_NAME]


def test_held_trajectories_and_the_guard_counters_round_trip(tmp_path: Path) -> None:
    from actors.guard.control import fold
    from learner.state import Control
    from tests.unit.actors.guard_records import RUN, graded, pinned

    config = PlannerConfig(group_size=2)
    state, _ = apply(PlannerState(), Control(fold(RUN, [pinned(hold=True)])), config)
    for offset, episode in enumerate(("h1", "h2")):
        held = graded(testing.trajectory(episode_id=episode, group_id="g"))
        state, _ = apply(state, Arrival(held, Position(TOPIC, 0, offset), 7 + offset), config)
    assert list(state.held) == ["h1", "h2"] and state.counters.held == 2
    saved = a_checkpoint()
    saved = checkpoint.Checkpoint(
        planner=state, trainable=saved.trainable, optimizer=saved.optimizer, published=saved.published,
        adaptation=saved.adaptation,
    )  # fmt: skip
    checkpoint.save(tmp_path, saved)
    loaded = checkpoint.load(tmp_path)
    assert loaded is not None
    # The control state is not in the checkpoint: the learner reads run.control again when it starts.
    assert loaded.planner == dataclasses.replace(state, control=None)
    assert list(loaded.planner.held) == ["h1", "h2"] and loaded.planner.waiting == 2


def test_a_checkpoint_written_before_the_guard_loads_with_nothing_held(tmp_path: Path) -> None:
    """A planner state as the learner wrote it before issue 15: no held trajectories, no guard counters."""
    saved = a_checkpoint()
    payload = checkpoint.planner_to_dict(saved.planner, default_codec())
    del payload["held"]
    for name in ("quarantined", "unpaired", "held"):
        del payload["counters"][name]
    torch.save(
        {"format": checkpoint.FORMAT, "planner": payload, "trainable": saved.trainable,
         "optimizer": saved.optimizer, "published": default_codec().encode(saved.published),
         "adaptation": saved.adaptation},
        tmp_path / checkpoint.FILE_NAME,
    )  # fmt: skip
    loaded = checkpoint.load(tmp_path)
    assert loaded is not None
    assert loaded.planner == saved.planner
    assert loaded.planner.held == {} and loaded.planner.counters.quarantined == 0
