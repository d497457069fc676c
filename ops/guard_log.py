"""What the operator's guard commands share (`trialog run pause/resume`, `trialog quarantine`, the status and
the audit): reading a run's control log and completed trajectories, the values they take (a grade time, a
version prefix), the trajectories a quarantine rule matches, and writing a control record.

Pure but for `read_control`, `read_completed` and `ControlWriter`, the thin Kafka adapters.
"""

from __future__ import annotations

import dataclasses
import getpass
import re
import socket
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from actors.guard import control as run_control
from actors.guard.control import VERSION, ControlState, grade_version
from ops.audit import LogRecord, format_time, rule_json
from schemas.codec import Codec, DecodeError, default_codec
from schemas.common import Producer, RecordMeta
from schemas.run_control import ANY, CONTROL_TYPES, ControlRecord, TrajectoriesQuarantined
from schemas.topics import RUN_CONTROL, TRAJECTORIES_COMPLETED, topic_name
from schemas.trajectories import TrajectoryCompleted
from schemas.versions import Component

COMPONENTS = (*(c.value for c in Component), VERSION)
"""What `trialog quarantine --version V --component C` may name (`version`: any of a grade's versions)."""
MIN_PREFIX = 8
SEND_TIMEOUT_S = 30.0
_RELATIVE = re.compile(r"-(\d+(?:\.\d+)?)([smhd])")
_UNIT_S = {"s": 1, "m": 60, "h": 3600, "d": 86400}
_HEX = re.compile(r"[0-9a-f]+")


class GuardError(ValueError):
    """A value that names nothing in the run (an unknown or ambiguous version), with the candidates."""


def operator() -> Producer:
    """Who writes an operator's control record: kind "operator", instance user@host."""
    return Producer("operator", f"{getpass.getuser()}@{socket.gethostname()}")


def operator_meta(now_us: int) -> RecordMeta:
    return RecordMeta(uuid.uuid4().hex, now_us, operator())


# -- values -------------------------------------------------------------------------------------------------


def parse_time(text: str, now_us: int) -> int:
    """A grade time in µs since the epoch: ISO-8601 with a zone (`2025-01-31T12:00:00Z`, `...+02:00`) or
    relative to `now_us` (`-30m`, `-2h`, `-1d`, `-90s`). A time without a zone is refused: whose clock?"""
    relative = _RELATIVE.fullmatch(text.strip())
    if relative is not None:
        return now_us - int(float(relative.group(1)) * _UNIT_S[relative.group(2)] * 1_000_000)
    try:
        when = datetime.fromisoformat(text.strip().replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise ValueError(
            f"expected an ISO-8601 time with a zone (2025-01-31T12:00:00Z) or -30m / -2h / -1d, not {text!r}"
        ) from None
    if when.tzinfo is None:
        raise ValueError(f"{text!r} has no zone: add Z (UTC) or an offset such as +02:00")
    return int(when.timestamp() * 1_000_000)


def check_prefix(prefix: str, component: str) -> str:
    """A version prefix as typed, checked before anything is read: at least 8 hex characters (after an
    optional `sha256:`), except for a task version, which is any name."""
    if component == Component.TASK.value:
        if not prefix:
            raise ValueError("a task version cannot be empty")
        return prefix
    digits = prefix.removeprefix("sha256:")
    if len(digits) < MIN_PREFIX or not _HEX.fullmatch(digits):
        raise ValueError(
            f"a version prefix is at least {MIN_PREFIX} hex digits (optionally after sha256:), not {prefix!r}"
        )
    return prefix


def seen_versions(trajectories: Iterable[TrajectoryCompleted], component: str) -> set[str]:
    """Every version of `component` that the trajectories' grades name."""
    found: set[str] = set()
    for t in trajectories:
        found.update(grade_version(t.grade_versions, t.meta.task_version, component))
    return found


def resolve_version(prefix: str, component: str, seen: Iterable[str]) -> str:
    """The one version among `seen` that `prefix` names (exactly, or as a prefix, with or without the
    `sha256:` of an image digest); a `GuardError` listing the candidates when none or several do."""
    versions = sorted(set(seen))
    if prefix in versions:
        return prefix
    matching = [v for v in versions if v.startswith(prefix) or v.removeprefix("sha256:").startswith(prefix)]
    if len(matching) == 1:
        return matching[0]
    what = "version" if component == VERSION else f"{component} version"
    if not matching:
        known = ", ".join(v[:19] for v in versions) or "none"
        raise GuardError(f"no {what} of the run's trajectories starts with {prefix!r} (seen: {known})")
    raise GuardError(f"{prefix!r} names {len(matching)} {what}s: {', '.join(matching)}; give more digits")


# -- rules -------------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RuleSpec:
    """What an operator asks to quarantine: a component's version (or every grade, ANY) in a time window."""

    component: str
    value: str
    since_us: int = 0
    until_us: int | None = None
    reason: str = ""

    def draft(self, run: str, meta: RecordMeta, rule_id: str) -> TrajectoriesQuarantined:
        return TrajectoriesQuarantined(
            meta, run, rule_id, self.component, self.value, self.since_us, self.until_us, self.reason, ()
        )


def matched(
    rule: TrajectoriesQuarantined, trajectories: Iterable[TrajectoryCompleted]
) -> list[TrajectoryCompleted]:
    """The trajectories `rule` quarantines, in the order given."""
    return [t for t in trajectories if run_control.matches(rule, t)]


def with_episodes(
    rule: TrajectoriesQuarantined, found: Sequence[TrajectoryCompleted]
) -> TrajectoriesQuarantined:
    return dataclasses.replace(rule, episode_ids=tuple(t.meta.episode_id for t in found))


def trajectory_row(t: TrajectoryCompleted, control: ControlState | None = None) -> dict[str, Any]:
    versions = t.grade_versions
    rule = control.quarantine_rule(t) if control is not None else None
    return {
        "episode": t.meta.episode_id,
        "task": t.meta.task_id,
        "task_version": t.meta.task_version,
        "verdict": t.verdict.value,
        "reward": t.reward,
        "graded_at": format_time(t.graded_at_us),
        "graded_at_us": t.graded_at_us,
        "versions": None if versions is None else versions.to_record(),
        "already_quarantined_by": None if rule is None else rule.rule_id,
    }


def rows_table(rows: Sequence[dict[str, Any]]) -> str:
    """The human form of `trajectory_row`s: one line each, the versions shortened."""
    lines = []
    for row in rows:
        versions = row["versions"]
        short = (
            "no versions"
            if versions is None
            else f"verifier {versions['verifier'][:12]} image {versions['image'][:19]} "
            f"tests {versions['tests'][:12]} reward {versions['reward_config'][:12]}"
        )
        lines.append(
            f"  {row['episode']}  {row['task']}@{row['task_version']}  {row['verdict']}  "
            f"{row['reward']:+.2f}  graded {row['graded_at']}  {short}"
        )
    return "\n".join(lines)


def rule_text(rule: TrajectoriesQuarantined) -> str:
    what = "every grade" if rule.component == ANY else f"{rule.component} {rule.value[:19]}"
    window = ""
    if rule.since_us or rule.until_us is not None:
        until = "now" if rule.until_us is None else format_time(rule.until_us)
        window = f" graded {format_time(rule.since_us) if rule.since_us else 'from the start'} to {until}"
    return f"{rule.rule_id}: {what}{window} ({rule.reason or 'no reason given'})"


# -- Kafka -------------------------------------------------------------------------------------------------


def decode_control(records: Iterable[LogRecord], codec: Codec | None = None) -> Iterator[ControlRecord]:
    codec_ = codec or default_codec()
    for record in records:
        if record.value is None:
            continue
        try:
            value = codec_.decode(record.value)
        except DecodeError:
            continue
        if isinstance(value, CONTROL_TYPES):
            yield value


def read_control_records(bootstrap: str, run: str, timeout_s: float = 30.0) -> list[LogRecord]:
    """The run's `run.control` records as logged (none for a run older than the topic). Raises
    `ops.runlog.LogReadError` when Kafka cannot be read."""
    return _read(bootstrap, run, RUN_CONTROL.name, timeout_s, skip_missing=True)


def read_control(bootstrap: str, run: str, timeout_s: float = 30.0) -> ControlState:
    return run_control.fold(run, decode_control(read_control_records(bootstrap, run, timeout_s)))


def read_completed(bootstrap: str, run: str, timeout_s: float = 30.0) -> list[TrajectoryCompleted]:
    """The run's completed trajectories (once per episode, the first copy, without their steps)."""
    codec = default_codec()
    found: dict[str, TrajectoryCompleted] = {}
    for record in _read(bootstrap, run, TRAJECTORIES_COMPLETED.name, timeout_s, skip_missing=False):
        try:
            t = codec.decode_as(record.value or b"", TrajectoryCompleted)
        except DecodeError:
            continue
        if t.meta.run_id == run:
            found.setdefault(t.meta.episode_id, dataclasses.replace(t, steps=()))
    return list(found.values())


def _read(bootstrap: str, run: str, base: str, timeout_s: float, *, skip_missing: bool) -> list[LogRecord]:
    from kafka.errors import KafkaError

    from ops.runlog import LogReadError
    from streams.kafka.reader import LogReader, ReadError

    name = topic_name(run, base)
    try:
        with LogReader(
            bootstrap, [name], require_topics=not skip_missing, skip_missing=skip_missing,
            client_id="trialog-guard", connect_timeout_s=min(10.0, timeout_s),
        ) as reader:  # fmt: skip
            return [
                LogRecord(base, r.partition, r.offset, r.key, r.value, r.timestamp, tuple(r.headers or ()))
                for r in reader.to_end(timeout_s=timeout_s)
            ]
    except KafkaError as exc:
        raise LogReadError(f"cannot read {name} on {bootstrap}: {exc!r}") from exc
    except ReadError as exc:
        raise LogReadError(f"run {run!r}: {exc} (is the run name right?)") from exc


class ControlWriter:
    """Writes control records on the run's `run.control`, each acknowledged by every replica (acks=all)
    before `write` returns."""

    def __init__(self, bootstrap: str, run: str, codec: Codec | None = None) -> None:
        from streams.kafka import clients

        self.topic = topic_name(run, RUN_CONTROL.name)
        self.codec = codec or default_codec()
        self._producer = clients.producer(bootstrap)

    def write(self, record: ControlRecord) -> None:
        self._producer.send(self.topic, value=self.codec.encode(record)).get(SEND_TIMEOUT_S)

    def close(self) -> None:
        self._producer.close()


__all__ = ["format_time", "rule_json"]  # re-exported: the audit's, shared by the guard commands
