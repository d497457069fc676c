"""Null rollout, sandbox and verifier workers for `trialog bench pipeline`: answers at once, real records."""

from __future__ import annotations

import dataclasses
import hashlib

from schemas.actions import RunCommand, Submit
from schemas.blobs import BlobRef
from schemas.commands import StartEpisode
from schemas.common import EpisodeConfig, Output, Verdict
from schemas.events import ActionProposed, RewardAssigned, StepExecuted
from schemas.origin import Origin
from schemas.publications import TaskPublished
from schemas.record import Record
from schemas.requests import PolicyRequest, SandboxRequest, VerifyRequest
from schemas.topics import POLICY_RESULTS, SANDBOX_RESULTS, VERIFY_RESULTS, Topic

TASK_ID = "bench-task"
TASK_VERSION = hashlib.sha256(b"bench-task").hexdigest()
IMAGE = "null"


def task_record() -> TaskPublished:
    meta = Origin.system("bench", "bench").record_meta()
    return TaskPublished(
        meta, TASK_ID, TASK_VERSION, "do nothing", IMAGE, 30.0, "true", None, (), BlobRef.of(b"")
    )


def start_commands(run_id: str, episodes: int, steps: int) -> list[StartEpisode]:
    origin = Origin.system("bench-scheduler", "bench")
    config = EpisodeConfig(max_steps=steps + 1)
    return [
        StartEpisode(
            origin.record_meta(),
            run_id,
            f"{run_id}-ep{i:05d}",
            TASK_ID,
            TASK_VERSION,
            0,
            config,
            IMAGE,
            f"{run_id}-g{i:05d}",
            i,
        )
        for i in range(episodes)
    ]


class NullWorkers:
    """`run true` for the first `steps` steps, then submit; every step succeeds; every grade passes."""

    def __init__(self, steps: int) -> None:
        self.steps = steps
        self.rollout = Origin.system("rollout", "null")
        self.sandbox = Origin.system("sandbox", "null")
        self.verifier = Origin.system("verifier", "null")

    def answer(self, request: Record) -> tuple[Topic, Record]:
        if isinstance(request, PolicyRequest):
            step = request.meta.step
            action = RunCommand("true") if step < self.steps else Submit()
            meta = self.rollout.reply_meta(request.meta)
            return POLICY_RESULTS, ActionProposed(meta, action, "null", 1, (1,), (0.0,), 1)
        if isinstance(request, SandboxRequest):
            meta = dataclasses.replace(
                self.sandbox.reply_meta(request.meta), snapshot_id=f"snap-null-{request.meta.step}"
            )
            return SANDBOX_RESULTS, StepExecuted(meta, 0, Output(""), Output(""), False, 1)
        if isinstance(request, VerifyRequest):
            meta = self.verifier.reply_meta(request.meta)
            return VERIFY_RESULTS, RewardAssigned(meta, 1.0, Verdict.PASS, 1, 1, (), (), "null")
        raise TypeError(f"not a request: {type(request).__name__}")
