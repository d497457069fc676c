"""Deterministic episode builders for tests, golden logs and benchmarks.

`EpisodeScript` plays the owner and its workers: it stamps each event with a fixed clock and sequential
ids, links it into the chain and keeps the exact bytes it "appended", so a script always produces the same
log.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import TypeVar

from schemas.actions import Action
from schemas.blobs import BlobRef
from schemas.chain import digest
from schemas.codec import Codec
from schemas.common import (
    GENESIS_HASH,
    EpisodeConfig,
    EventMeta,
    FailureClass,
    Output,
    Producer,
    Verdict,
)
from schemas.events import (
    ActionProposed,
    EpisodeCompleted,
    EpisodeEvent,
    EpisodeFailed,
    EpisodeStarted,
    RewardAssigned,
    StepExecuted,
)
from schemas.origin import FixedClock, SequentialIds

E = TypeVar("E", bound=EpisodeEvent)

PRODUCERS = {
    "streams": Producer("streams", "streams-0"),
    "rollout": Producer("rollout", "rollout-0"),
    "sandbox": Producer("sandbox", "sandbox-0"),
    "verifier": Producer("verifier", "verifier-0"),
}


@dataclass
class EpisodeScript:
    """Builds one well-formed episode, event by event: `start()`, `act()`, `execute()`, ..., `complete()`."""

    codec: Codec
    episode_id: str = "ep-0001"
    run_id: str = "run-test"
    task_id: str = "task-hello"
    task_version: str = hashlib.sha256(b"task-hello").hexdigest()
    policy_version: int = 1
    config: EpisodeConfig = field(default_factory=lambda: EpisodeConfig(max_steps=16))
    clock: FixedClock = field(default_factory=FixedClock)
    ids: SequentialIds = field(default_factory=lambda: SequentialIds("ev"))
    log: list[tuple[EpisodeEvent, bytes]] = field(default_factory=list)
    head: str = GENESIS_HASH
    step: int = 0
    snapshot_id: str | None = None

    # -- views ----------------------------------------------------------------------------------------

    @property
    def events(self) -> list[EpisodeEvent]:
        return [event for event, _ in self.log]

    @property
    def records(self) -> list[bytes]:
        return [data for _, data in self.log]

    @property
    def entries(self) -> list[tuple[EpisodeEvent, str]]:
        """(event, digest) pairs, as `schemas.fold.fold` takes them."""
        return [(event, digest(data)) for event, data in self.log]

    # -- building -------------------------------------------------------------------------------------

    def meta(self, kind: str, attempt: int = 1, snapshot_id: str | None = None) -> EventMeta:
        return EventMeta(
            event_id=self.ids.new_id(),
            occurred_at_us=self.clock.now_us(),
            producer=PRODUCERS[kind],
            run_id=self.run_id,
            episode_id=self.episode_id,
            task_id=self.task_id,
            task_version=self.task_version,
            step=self.step,
            attempt=attempt,
            policy_version=self.policy_version,
            snapshot_id=snapshot_id if snapshot_id is not None else self.snapshot_id,
            prev_hash=self.head,
        )

    def append(self, event: E, data: bytes | None = None) -> E:
        """Log `event` (as `data` if given: bytes from an older schema version) and move the chain head."""
        data = self.codec.encode(event) if data is None else data
        self.log.append((event, data))
        self.head = digest(data)
        return event

    def start(
        self, image: str = "trialog/task-hello:1", group_id: str = "group-1", seed: int = 7
    ) -> EpisodeStarted:
        return self.append(
            EpisodeStarted(self.meta("streams"), "cmd-0001", self.config, image, group_id, seed)
        )

    def act(
        self,
        action: Action,
        *,
        attempt: int = 1,
        response: str | BlobRef = "",
        token_ids: tuple[int, ...] = (11, 12, 13),
        logprobs: tuple[float, ...] = (-0.5, -0.25, -0.125),
    ) -> ActionProposed:
        meta = self.meta("rollout", attempt)
        return self.append(
            ActionProposed(meta, action, response or repr(action), 100, token_ids, logprobs, 2_000)
        )

    def execute(
        self,
        *,
        exit_code: int = 0,
        stdout: bytes = b"",
        stderr: bytes = b"",
        timed_out: bool = False,
        oom_killed: bool = False,
        attempt: int = 1,
        output_limit: int = 256,
        snapshot_id: str | None = None,
        kind: str = "sandbox",
    ) -> StepExecuted:
        """The step's result; `kind="streams"` for the owner's answer to an InvalidReply."""
        snapshot = snapshot_id or f"snap-{self.episode_id}-{self.step}-{attempt}"
        event = StepExecuted(
            self.meta(kind, attempt, snapshot),
            exit_code,
            Output.capture(stdout, output_limit),
            Output.capture(stderr, output_limit),
            timed_out,
            50_000 + 1_000 * self.step,
            oom_killed,
        )
        self.append(event)
        self.step += 1
        self.snapshot_id = snapshot
        return event

    def reward(
        self,
        reward: float = 1.0,
        verdict: Verdict = Verdict.PASS,
        passed: int = 3,
        total: int = 3,
        failed_tests: tuple[str, ...] = (),
        tampered_paths: tuple[str, ...] = (),
        attempt: int = 1,
    ) -> RewardAssigned:
        meta = self.meta("verifier", attempt)
        event = RewardAssigned(
            meta, reward, verdict, passed, total, failed_tests, tampered_paths, "verifier-1"
        )
        return self.append(event)

    def complete(self) -> EpisodeCompleted:
        rewarded = next(e for e in reversed(self.events) if isinstance(e, RewardAssigned))
        started = self.events[0].meta.occurred_at_us
        meta = self.meta("streams")
        duration = meta.occurred_at_us - started
        return self.append(EpisodeCompleted(meta, rewarded.reward, rewarded.verdict, self.step, duration))

    def fail(self, failure: FailureClass, reason: str, retryable: bool = False) -> EpisodeFailed:
        return self.append(EpisodeFailed(self.meta("streams"), failure, reason, retryable))
