"""What an exec returns, and what a step records: the exec's result plus the snapshot taken after it."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class ExecResult:
    exit_code: int  # 128+N when killed by signal N (137: killed, by the timeout or the OOM killer)
    stdout: str
    stderr: str
    timed_out: bool = False
    oom_killed: bool = False
    stdout_dropped: int = 0  # bytes cut from the middle of the stream (see output.BoundedOutput)
    stderr_dropped: int = 0
    duration_s: float = 0.0
    stdout_bytes: int = 0  # everything the command wrote to the stream, kept or dropped
    stderr_bytes: int = 0
    # Resource signals, where the backend measures them (None: not measured): the command's processes
    # still alive when it ended (then killed), and the sandbox's memory high-water mark in bytes.
    left_running: int | None = None
    memory_peak_bytes: int | None = None

    @property
    def truncated(self) -> bool:
        return self.stdout_dropped > 0 or self.stderr_dropped > 0

    def to_json(self) -> dict[str, Any]:
        return {
            "exit_code": self.exit_code,
            "stdout": self.stdout,
            "stderr": self.stderr,
            "timed_out": self.timed_out,
            "oom_killed": self.oom_killed,
            "truncated": self.truncated,
            "stdout_dropped_bytes": self.stdout_dropped,
            "stderr_dropped_bytes": self.stderr_dropped,
            "duration_s": self.duration_s,
            "stdout_bytes": self.stdout_bytes,
            "stderr_bytes": self.stderr_bytes,
            "left_running": self.left_running,
            "memory_peak_bytes": self.memory_peak_bytes,
        }

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> ExecResult:
        return cls(
            exit_code=obj["exit_code"],
            stdout=obj["stdout"],
            stderr=obj["stderr"],
            timed_out=obj["timed_out"],
            oom_killed=obj["oom_killed"],
            stdout_dropped=obj["stdout_dropped_bytes"],
            stderr_dropped=obj["stderr_dropped_bytes"],
            duration_s=obj["duration_s"],
            stdout_bytes=obj["stdout_bytes"],
            stderr_bytes=obj["stderr_bytes"],
            left_running=obj.get("left_running"),  # results stored before they were measured have neither
            memory_peak_bytes=obj.get("memory_peak_bytes"),
        )


@dataclass(frozen=True, slots=True)
class StepResult:
    """One executed step: the exec's result and the id of the workspace snapshot taken right after it."""

    result: ExecResult
    snapshot_id: str

    def to_json(self) -> dict[str, Any]:
        return {**self.result.to_json(), "snapshot_id": self.snapshot_id}

    @classmethod
    def from_json(cls, obj: Mapping[str, Any]) -> StepResult:
        return cls(ExecResult.from_json(obj), obj["snapshot_id"])
