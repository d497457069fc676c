"""Which `episode.events` records end an episode for the sandbox worker (the tail itself runs on Kafka in
tests/integration/sandbox/test_reaper.py)."""

from __future__ import annotations

import dataclasses

from sandbox_agent.episode_ends import ended_episode
from schemas.actions import RunCommand
from schemas.codec import default_codec
from schemas.common import FailureClass, Output, Verdict
from schemas.events import EpisodeCompleted, EpisodeFailed, StepExecuted
from tests.unit.sandbox.requests import sandbox_request

CODEC = default_codec()
META = dataclasses.replace(sandbox_request(RunCommand("true"), episode="ep-9").meta, snapshot_id=None)


def test_a_completed_or_failed_episode_ends_and_nothing_else_does() -> None:
    completed = EpisodeCompleted(META, 1.0, Verdict.PASS, 3, 1000)
    failed = EpisodeFailed(META, FailureClass.SANDBOX_CRASH, "lost")
    executed = StepExecuted(META, 0, Output("", False, 0), Output("", False, 0), False, 10, False)
    assert ended_episode(CODEC.encode(completed), CODEC) == "ep-9"
    assert ended_episode(CODEC.encode(failed), CODEC) == "ep-9"
    assert ended_episode(CODEC.encode(executed), CODEC) is None
    assert ended_episode(b"\x00garbage", CODEC) is None
    assert ended_episode(None, CODEC) is None
