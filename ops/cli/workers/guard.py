"""`trialog worker guard`: watch a run's grader while the run goes on (`actors.guard`): compare every grade's
versions with the run's pin, ask the verifiers for canaries (known workspaces of the run's tasks: the
reference solution, the untouched repo, known reward hacks), and on a wrong canary alert, pause the run and
quarantine what the faulty grader graded. Also runs the alert rules over the run's events (`--alert-*`).

Tasks come from local task folders (`--tasks`, the same the verifier reads): the canaries' workspaces are
built from them and stored as snapshots in the run's object store (`--objects`). No Kafka yet: it waits
for the broker. It needs no Docker engine: the verifiers grade the canaries.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from ops.cli import kit
from ops.cli.alert_options import add_alert_options, alert_settings_of
from streams.errors import StackError

if TYPE_CHECKING:
    from actors.guard.core import CanaryPlan, Case


def register(workers: kit.Subparsers) -> None:
    command = kit.command(
        workers,
        "guard",
        "watch a run's grader: pinned versions, reward canaries, pause and quarantine, alerts",
        handler=_cmd_worker_guard,
        examples=(
            "trialog worker guard --run RUN --tasks examples/tasks",
            "trialog worker guard --run RUN --tasks examples/tasks --objects /shared/objects --seed 7",
        ),
    )
    command.add_argument(
        "--tasks", type=Path, action="append", required=True, metavar="DIR",
        help="a task folder or a folder of them (repeatable): the canaries' workspaces are built from them",
    )  # fmt: skip
    kit.add_objects(command, "the object store shared by all workers of the run (canary snapshots)")
    command.add_argument("--seed", type=int, default=0, metavar="N", help="seed of the canaries' task draw")
    add_alert_options(command)
    kit.add_bootstrap(command)
    kit.add_run(command)
    kit.add_instance(command)
    kit.add_telemetry(command)
    kit.add_lifecycle(command)


def _cmd_worker_guard(args: argparse.Namespace) -> int:
    from actors.guard.canaries import canary_snapshot, cases_for
    from actors.guard.core import Case, Guard, GuardOptions
    from actors.guard.hook import EngineHook, extra_topics
    from actors.guard.worker import GuardProcess, GuardProcessSettings
    from actors.tasks.spec import TaskError
    from actors.verifier.tasks import FolderTasks, TaskUnavailable
    from ops.console import say
    from ops.stores import open_objects
    from ops.telemetry.setup import start as start_telemetry
    from schemas.origin import Origin
    from streams.kafka.serving import connected

    try:
        tasks = FolderTasks(args.tasks)
    except TaskError as exc:
        raise StackError(str(exc), "fix or remove that task folder") from None
    objects = open_objects(args.objects)
    library = {task.id: {case.name: case for case in cases_for(task)} for task in tasks.tasks}
    cases: dict[str, list[Case]] = {
        task_id: [Case(case.name, case.expect_pass) for case in by_name.values()]
        for task_id, by_name in library.items()
    }

    def build(plan: CanaryPlan) -> str:
        try:
            task = tasks.get(plan.task.task_id, plan.task.task_version)
        except TaskUnavailable as exc:
            raise RuntimeError(f"{exc.reason}: {exc.detail}") from None
        return canary_snapshot(task, library[task.id][plan.case.name], objects)

    settings = alert_settings_of(args)  # checked before any service is touched
    origin = Origin.system("guard", args.instance)
    guard = Guard(args.run, origin, cases, GuardOptions(seed=args.seed))
    bootstrap = kit.bootstrap_of(args)
    kit.worker_logging()
    start_telemetry(kit.telemetry_of(args, "trialog-guard"))
    health = kit.health_of(args)
    with kit.worker_lifetime(args, health=health) as stopping:
        health.ready("guard", False, f"waiting for Kafka at {bootstrap}")
        if not connected(bootstrap, stopping, say):  # the alert engine reads the run's alerts first
            return 1
        hook = EngineHook.for_run(
            bootstrap, args.run, origin, settings, webhook=args.alert_webhook,
            sandbox_metrics=args.sandbox_metrics,
        )  # fmt: skip
        try:
            process = GuardProcess(
                GuardProcessSettings(bootstrap, args.run, extra_topics=extra_topics()), guard, build, origin,
                alerts=hook,
            )  # fmt: skip
            process.stopping = stopping
            process.health = health
            return process.run()
        finally:
            hook.close()
