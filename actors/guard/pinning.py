"""A run's pin (`RunPinned`): the versions of everything its grades depend on, written first on
`run.control` by `run start`, and compared by the guard with what every grade names.

`run_pin` computes the versions exactly as the verifier names them (`actors.verifier.versions`): the
verifier's code and settings (no fault), each task's version and hidden tests' hash, the image's content
id, the reward rule's hash. `settle_pin` decides what to write: the first pin of a run stands for the whole
run, and a later start whose versions differ is reported, not written over (the grades will show the change
as `VersionChanged` records, if the workers run the new versions).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from actors.guard.control import ControlState
from actors.tasks.reward_config import DEFAULT as DEFAULT_REWARD
from actors.tasks.reward_config import RewardConfig
from actors.tasks.spec import Task
from actors.verifier.versions import tests_version, verifier_version
from actors.verifier.worker import VERIFIER_ID
from schemas.origin import Origin
from schemas.run_control import GuardSettings, PinnedTask, RunPinned

DEFAULT_CANARIES_PER_MINUTE = 3.0
DEFAULT_MAX_CANARY_SHARE = 0.05


def default_guard() -> GuardSettings:
    return GuardSettings(
        canaries_per_minute=DEFAULT_CANARIES_PER_MINUTE,
        max_canary_share=DEFAULT_MAX_CANARY_SHARE,
        pause_on_canary_failure=True,
        hold_for_clearance=True,
    )


def run_pin(
    run_id: str,
    tasks: Sequence[Task],
    image: str,
    guard: GuardSettings,
    origin: Origin,
    reward: RewardConfig = DEFAULT_REWARD,
) -> RunPinned:
    pinned = tuple(
        PinnedTask(task.id, task.version, tests_version(task)) for task in sorted(tasks, key=lambda t: t.id)
    )
    return RunPinned(
        origin.record_meta(), run_id, verifier_version(VERIFIER_ID), image, reward.version,
        pinned, guard,
    )  # fmt: skip


@dataclass(frozen=True, slots=True)
class Settled:
    write: RunPinned | None  # the pin to write (None: the run is pinned already)
    differences: tuple[str, ...]  # how this start's versions differ from the run's pin, one line each


def settle_pin(state: ControlState, pin: RunPinned) -> Settled:
    existing = state.pinned
    if existing is None:
        return Settled(pin, ())
    differences: list[str] = []
    for name in ("verifier", "image", "reward_config"):
        was, now = getattr(existing, name), getattr(pin, name)
        if was != now:
            differences.append(f"{name}: pinned {was[:16]}, now {now[:16]}")
    before = {task.task_id: task for task in existing.tasks}
    for task in pin.tasks:
        old = before.get(task.task_id)
        if old is None:
            differences.append(f"task {task.task_id}: not pinned by the run")
        elif old != task:
            differences.append(
                f"task {task.task_id}: pinned {old.task_version[:12]}, now {task.task_version[:12]}"
            )
    return Settled(None, tuple(differences))
