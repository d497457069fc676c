"""The audit of a run's log, pure: raw records in, an `AuditReport` out (`trialog audit`; what a healthy log
is: docs/crash-consistency.md). Reading Kafka is the CLI's thin adapter (`ops.cli.audit`); this module never
does I/O.

What it checks, per episode (records grouped by the `meta.episode_id` they decode to, in log order):

* **outcome**: started (`EpisodeStarted`), completed, failed (by `EpisodeFailed.failure`), in flight (started,
  not ended, last activity younger than `stale_after_s` before the newest record of the run) or lost
  (started, not ended, silent for longer). An episode's *activity* is every record naming it on the audited
  topics (events, requests, trajectories): an owner re-issuing a timed-out request is alive;
* **duplicate steps** on `episode.events`: a record repeating the (episode, step, event type) of an earlier
  record with another event id, or repeating an event id. The owner appends each fact once; at-least-once
  delivery must never show in the log of record. Each extra record counts once;
* **the chain**: `schemas.chain.verify_chain` over the episode's exact record bytes (the first break);
* **the fold**: `schemas.fold.fold` over (event, digest); a `FoldError` is reported with its position;
* **undecodable** records on any audited topic, by `DecodeError.reason` (a record of the wrong type for its
  topic is `unexpected_type`); an undecodable event also breaks the chain of the event after it;
* **trajectories**: episodes with a record on `trajectories.completed` / `trajectories.failed`, and episodes
  with more than one trajectory record (a streams worker that crashed after publishing and before
  committing publishes again: a known at-least-once effect, reported, not a duplicate step);
* **redone work**: per request kind, the (episode, step) pairs issued with attempt > 1 (re-issued after a
  timeout or a crashed worker).

* **quarantine**: the run's control log (`run.control`, when read: records of that topic are folded by
  `actors.guard.control`) says which completed trajectories are quarantined, by which rule. Listed, never a
  finding: a quarantine is the guard working, and the run stays healthy.

A healthy run has no lost episode, no duplicate step and no broken chain (`AuditReport.healthy`).
"""

from __future__ import annotations

import dataclasses
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from actors.guard import control as run_control
from ops.log_defaults import DEFAULT_STALE_AFTER_S
from schemas import topics
from schemas.chain import digest, verify_chain
from schemas.codec import Codec, DecodeError, DecodeReason, default_codec
from schemas.events import (
    EPISODE_EVENT_TYPES,
    EpisodeCompleted,
    EpisodeEvent,
    EpisodeFailed,
    EpisodeStarted,
)
from schemas.fold import FoldError, fold
from schemas.requests import PolicyRequest, SandboxRequest, VerifyRequest
from schemas.run_control import CONTROL_TYPES, TrajectoriesQuarantined
from schemas.trajectories import TrajectoryCompleted, TrajectoryFailed

EVENTS = topics.EPISODE_EVENTS.name
CONTROL = topics.RUN_CONTROL.name
Request = PolicyRequest | SandboxRequest | VerifyRequest
Trajectory = TrajectoryCompleted | TrajectoryFailed

REQUEST_TOPICS: dict[str, tuple[str, type[Request]]] = {
    "policy": (topics.POLICY_REQUESTS.name, PolicyRequest),
    "sandbox": (topics.SANDBOX_REQUESTS.name, SandboxRequest),
    "verify": (topics.VERIFY_REQUESTS.name, VerifyRequest),
}
TRAJECTORY_TOPICS: dict[str, tuple[str, type[Trajectory]]] = {
    "completed": (topics.TRAJECTORIES_COMPLETED.name, TrajectoryCompleted),
    "failed": (topics.TRAJECTORIES_FAILED.name, TrajectoryFailed),
}
AUDITED_TOPICS: tuple[str, ...] = (
    EVENTS,
    *(topic for topic, _ in REQUEST_TOPICS.values()),
    *(topic for topic, _ in TRAJECTORY_TOPICS.values()),
)
"""The base names of the topics an audit reads (prefix them with `schemas.topics.topic_name`); it also folds
`run.control` (CONTROL) when given its records: a run older than that topic has none."""


def format_time(us: int) -> str:
    """µs since the epoch as ISO-8601 UTC to the second ("-" for an unknown time)."""
    if us <= 0:
        return "-"
    return datetime.fromtimestamp(us / 1e6, UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


def rule_json(rule: TrajectoriesQuarantined) -> dict[str, Any]:
    """A quarantine rule as `run status`, `trialog quarantine` and the audit show it."""
    return {
        "rule": rule.rule_id,
        "component": rule.component,
        "value": rule.value,
        "since": format_time(rule.since_us) if rule.since_us else None,
        "until": None if rule.until_us is None else format_time(rule.until_us),
        "reason": rule.reason,
        "written_by": f"{rule.meta.producer.kind}:{rule.meta.producer.instance}",
        "written_at": format_time(rule.meta.occurred_at_us),
    }


@dataclass(frozen=True)
class Quarantine:
    """The completed trajectories the run's quarantine rules match, by the first rule that matches each."""

    by_rule: tuple[tuple[TrajectoriesQuarantined, tuple[str, ...]], ...] = ()

    @property
    def trajectories(self) -> int:
        return sum(len(episodes) for _, episodes in self.by_rule)

    def to_json(self) -> dict[str, Any]:
        return {
            "trajectories": self.trajectories,
            "rules": [{**rule_json(rule), "episodes": list(episodes)} for rule, episodes in self.by_rule],
        }

    def lines(self) -> list[str]:
        if not self.by_rule:
            return []
        out = [f"quarantined: {self.trajectories} trajectories by {len(self.by_rule)} rules"]
        for rule, episodes in self.by_rule:
            what = "every grade" if rule.component == "any" else f"{rule.component} {rule.value[:19]}"
            shown = rule_json(rule)
            window = f" graded {shown['since'] or 'from the start'} to {shown['until'] or 'now'}"
            window = window if rule.since_us or rule.until_us is not None else ""
            out.append(f"  {rule.rule_id}: {what}{window}: {len(episodes)} ({rule.reason or 'no reason'})")
            out.extend(f"    {episode}" for episode in episodes)
        return out


@dataclass(frozen=True, slots=True)
class LogRecord:
    """A record read from Kafka; `topic` is the base name (`episode.events`, not `r7.episode.events`)."""

    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    timestamp_ms: int = 0
    # Kafka headers (the trace context), kept so that a run bundle carries each record as it was logged.
    headers: tuple[tuple[str, bytes | None], ...] = ()

    @property
    def where(self) -> str:
        return f"{self.topic}[{self.partition}]@{self.offset}"


@dataclass(frozen=True, slots=True)
class EpisodeError:
    """One finding about one episode (or about a record whose episode is only known from its key)."""

    episode: str
    kind: str  # lost | duplicate_step | broken_chain | fold_error | undecodable
    detail: str
    where: str = ""  # topic[partition]@offset of the offending record, when there is one
    position: int | None = None  # index of the event in the episode's log, when there is one

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"episode": self.episode, "kind": self.kind, "detail": self.detail}
        if self.where:
            out["where"] = self.where
        if self.position is not None:
            out["position"] = self.position
        return out


@dataclass(frozen=True)
class AuditReport:
    records: int
    started: int
    completed: int
    failed: dict[str, int]
    in_flight: int
    lost: int
    duplicate_steps: int
    broken_chains: int
    undecodable: dict[str, int]
    fold_errors: int
    trajectories_completed: int
    trajectories_failed: int
    trajectories_repeated: int
    redone: dict[str, int]
    errors: tuple[EpisodeError, ...] = ()
    stale_after_s: float = DEFAULT_STALE_AFTER_S
    quarantine: Quarantine = Quarantine()

    @property
    def healthy(self) -> bool:
        return self.lost == 0 and self.duplicate_steps == 0 and self.broken_chains == 0

    @property
    def exit_code(self) -> int:
        return 0 if self.healthy else 1

    def to_json(self) -> dict[str, Any]:
        return {
            "healthy": self.healthy,
            "records": self.records,
            "started": self.started,
            "completed": self.completed,
            "failed": dict(sorted(self.failed.items())),
            "in_flight": self.in_flight,
            "lost": self.lost,
            "duplicate_steps": self.duplicate_steps,
            "broken_chains": self.broken_chains,
            "undecodable": dict(sorted(self.undecodable.items())),
            "fold_errors": self.fold_errors,
            "trajectories": {
                "completed": self.trajectories_completed,
                "failed": self.trajectories_failed,
                "repeated": self.trajectories_repeated,
            },
            "redone": dict(self.redone),
            "stale_after_s": self.stale_after_s,
            "episodes_with_errors": [error.to_json() for error in self.errors],
            "quarantined": self.quarantine.to_json(),
        }

    def table(self) -> str:
        """The human form: a short two-column table, then the findings."""
        failed = sum(self.failed.values())
        by_class = ", ".join(f"{name} {count}" for name, count in sorted(self.failed.items()))
        undecodable = sum(self.undecodable.values())
        by_reason = ", ".join(f"{name} {count}" for name, count in sorted(self.undecodable.items()))
        rows = [
            ("records", str(self.records)),
            ("episodes started", str(self.started)),
            ("completed", str(self.completed)),
            ("failed", f"{failed}" + (f" ({by_class})" if by_class else "")),
            ("in flight", str(self.in_flight)),
            ("lost", f"{self.lost}" + (f" (silent > {self.stale_after_s:g} s)" if self.lost else "")),
            ("duplicate steps", str(self.duplicate_steps)),
            ("broken chains", str(self.broken_chains)),
            ("fold errors", str(self.fold_errors)),
            ("undecodable", f"{undecodable}" + (f" ({by_reason})" if by_reason else "")),
            (
                "trajectories",
                f"{self.trajectories_completed} completed, {self.trajectories_failed} failed, "
                f"{self.trajectories_repeated} repeated",
            ),
            ("redone steps", ", ".join(f"{kind} {count}" for kind, count in self.redone.items())),
        ]
        width = max(len(name) for name, _ in rows)
        lines = [f"{name:<{width}}  {value}" for name, value in rows]
        lines.append(f"{'verdict':<{width}}  {'healthy' if self.healthy else 'UNHEALTHY'}")
        if self.quarantine.by_rule:
            lines.append("")
            lines.extend(self.quarantine.lines())
        if self.errors:
            lines.append("")
            lines.append(f"episodes with errors ({len(self.errors)}):")
            for error in self.errors:
                at = f" at {error.where}" if error.where else ""
                lines.append(f"  {error.episode}  {error.kind}{at}: {error.detail}")
        return "\n".join(lines)


@dataclass
class _Episode:
    events: list[tuple[EpisodeEvent, bytes, LogRecord]] = field(default_factory=list)
    last_activity_us: int = 0


def _key_text(record: LogRecord) -> str:
    if not record.key:
        return "?"
    return record.key.decode("utf-8", errors="replace")


@dataclass
class Auditor:
    """Feed records (in log order per partition) with `add`, then `report()`. `audit()` does both."""

    stale_after_s: float = DEFAULT_STALE_AFTER_S
    codec: Codec = field(default_factory=default_codec)
    records: int = 0
    _episodes: dict[str, _Episode] = field(default_factory=lambda: defaultdict(_Episode))
    _undecodable: Counter[str] = field(default_factory=Counter)
    _errors: list[EpisodeError] = field(default_factory=list)
    _newest_us: int = 0
    _trajectories: dict[str, dict[str, int]] = field(
        default_factory=lambda: {kind: Counter() for kind in TRAJECTORY_TOPICS}
    )
    _redone: dict[str, set[tuple[str, int]]] = field(
        default_factory=lambda: {kind: set() for kind in REQUEST_TOPICS}
    )
    _control: list[object] = field(default_factory=list)  # run.control records, in log order
    _graded: dict[str, TrajectoryCompleted] = field(default_factory=dict)  # completed, without steps

    def add(self, record: LogRecord) -> None:
        self.records += 1
        data = record.value or b""
        try:
            obj = self.codec.decode(data)
        except DecodeError as err:
            self._bad(record, err.reason.value, str(err))
            return
        if record.topic == CONTROL:
            if not isinstance(obj, CONTROL_TYPES):
                self._unexpected(record, obj)
                return
            self._control.append(obj)
            return
        if record.topic == EVENTS:
            if not isinstance(obj, EPISODE_EVENT_TYPES):
                self._unexpected(record, obj)
                return
            episode = self._touch(obj.meta.episode_id, obj.meta.occurred_at_us)
            episode.events.append((obj, data, record))
            return
        for kind, (topic, cls) in REQUEST_TOPICS.items():
            if record.topic == topic:
                if not isinstance(obj, cls):
                    self._unexpected(record, obj)
                    return
                meta = obj.meta
                self._touch(meta.episode_id, meta.occurred_at_us)
                if meta.attempt > 1:
                    self._redone[kind].add((meta.episode_id, meta.step))
                return
        for kind, (topic, trajectory_cls) in TRAJECTORY_TOPICS.items():
            if record.topic == topic:
                if not isinstance(obj, trajectory_cls):
                    self._unexpected(record, obj)
                    return
                meta = obj.meta
                self._touch(meta.episode_id, meta.occurred_at_us)
                self._trajectories[kind][meta.episode_id] += 1
                if isinstance(obj, TrajectoryCompleted) and meta.episode_id not in self._graded:
                    self._graded[meta.episode_id] = dataclasses.replace(obj, steps=())
                return
        raise ValueError(f"{record.topic} is not an audited topic ({', '.join((*AUDITED_TOPICS, CONTROL))})")

    def _touch(self, episode_id: str, occurred_at_us: int) -> _Episode:
        episode = self._episodes[episode_id]
        episode.last_activity_us = max(episode.last_activity_us, occurred_at_us)
        self._newest_us = max(self._newest_us, occurred_at_us)
        return episode

    def _unexpected(self, record: LogRecord, obj: object) -> None:
        name = getattr(obj, "SCHEMA", type(obj).__name__)
        self._bad(record, DecodeReason.UNEXPECTED_TYPE.value, f"{name} does not belong on {record.topic}")

    def _bad(self, record: LogRecord, reason: str, detail: str) -> None:
        self._undecodable[reason] += 1
        self._errors.append(EpisodeError(_key_text(record), "undecodable", detail, record.where))

    def report(self) -> AuditReport:
        errors = list(self._errors)
        started = completed = in_flight = lost = duplicates = broken = fold_errors = 0
        failed: Counter[str] = Counter()
        stale_us = int(self.stale_after_s * 1_000_000)
        for episode_id, episode in sorted(self._episodes.items()):
            events = episode.events
            if not events:
                continue  # requests or trajectories only: nothing of record to audit
            is_started = any(isinstance(event, EpisodeStarted) for event, _, _ in events)
            started += is_started
            completed_event = next((e for e, _, _ in events if isinstance(e, EpisodeCompleted)), None)
            failed_event = next((e for e, _, _ in events if isinstance(e, EpisodeFailed)), None)
            if completed_event is not None:
                completed += 1
            if failed_event is not None:
                failed[failed_event.failure.value] += 1
            if is_started and completed_event is None and failed_event is None:
                silent_us = self._newest_us - episode.last_activity_us
                if silent_us > stale_us:
                    lost += 1
                    errors.append(
                        EpisodeError(
                            episode_id,
                            "lost",
                            f"not ended and silent for {silent_us / 1e6:.0f} s "
                            f"(last event {type(events[-1][0]).__name__} at step {events[-1][0].meta.step})",
                            events[-1][2].where,
                        )
                    )
                else:
                    in_flight += 1
            duplicates += self._duplicates(episode_id, events, errors)
            chain = verify_chain((data for _, data, _ in events), self.codec)
            if chain.first_break is not None:
                broken += 1
                cut = chain.first_break
                errors.append(
                    EpisodeError(
                        episode_id, "broken_chain", cut.reason, events[cut.index][2].where, cut.index
                    )
                )
            try:
                fold((event, digest(data)) for event, data, _ in events)
            except FoldError as err:
                fold_errors += 1
                where = events[err.index][2].where if err.index is not None else ""
                errors.append(
                    EpisodeError(episode_id, f"fold_error:{err.code}", err.message, where, err.index)
                )
        trajectory_counts = [self._trajectories[kind] for kind in TRAJECTORY_TOPICS]
        per_episode: Counter[str] = Counter()
        for counts in trajectory_counts:
            per_episode.update(counts)
        return AuditReport(
            records=self.records,
            started=started,
            completed=completed,
            failed=dict(failed),
            in_flight=in_flight,
            lost=lost,
            duplicate_steps=duplicates,
            broken_chains=broken,
            undecodable=dict(self._undecodable),
            fold_errors=fold_errors,
            trajectories_completed=len(self._trajectories["completed"]),
            trajectories_failed=len(self._trajectories["failed"]),
            trajectories_repeated=sum(1 for count in per_episode.values() if count > 1),
            redone={kind: len(pairs) for kind, pairs in self._redone.items()},
            errors=tuple(sorted(errors, key=lambda e: (e.episode, e.where, e.kind))),
            stale_after_s=self.stale_after_s,
            quarantine=self._quarantine(),
        )

    def _quarantine(self) -> Quarantine:
        # The run is the control log's own (its records name it; the topic is the run's).
        run = next((str(getattr(r, "run_id", "")) for r in self._control), "")
        control = run_control.fold(run, self._control)
        by_rule: dict[str, list[str]] = {rule.rule_id: [] for rule in control.rules}
        for episode, trajectory in sorted(self._graded.items()):
            rule = control.quarantine_rule(trajectory)
            if rule is not None:
                by_rule[rule.rule_id].append(episode)
        return Quarantine(tuple((rule, tuple(by_rule[rule.rule_id])) for rule in control.rules))

    @staticmethod
    def _duplicates(
        episode_id: str, events: list[tuple[EpisodeEvent, bytes, LogRecord]], errors: list[EpisodeError]
    ) -> int:
        slots: dict[tuple[int, str], str] = {}
        ids: set[str] = set()
        count = 0
        for event, _, record in events:
            meta = event.meta
            slot = (meta.step, type(event).__name__)
            if meta.event_id in ids:
                detail = f"event id {meta.event_id} appended again ({type(event).__name__}, step {meta.step})"
            elif slot in slots:
                detail = (
                    f"{type(event).__name__} for step {meta.step} appended again as {meta.event_id} "
                    f"(first {slots[slot]})"
                )
            else:
                ids.add(meta.event_id)
                slots[slot] = meta.event_id
                continue
            count += 1
            errors.append(EpisodeError(episode_id, "duplicate_step", detail, record.where))
        return count


def audit(
    records: Iterable[LogRecord],
    *,
    stale_after_s: float = DEFAULT_STALE_AFTER_S,
    codec: Codec | None = None,
    progress: Callable[[int], None] | None = None,
) -> AuditReport:
    """The report over `records` (each partition's records in offset order; partitions may interleave)."""
    auditor = Auditor(stale_after_s, codec or default_codec())
    for record in records:
        auditor.add(record)
        if progress is not None:
            progress(auditor.records)
    return auditor.report()
