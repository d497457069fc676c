"""`trialog tasks difficulty`: measure each task's pass rate with a policy version, record it for a run.

`add_difficulty(commands)` adds the command to the `tasks` group. The measurement is `ops.task_difficulty`:
a run of its own through the real pipeline (or, with --from-run, a run that already ran), tallied, and one
`TaskDifficulty` per task written on the tasks topic of the run that trains (`--for-run`).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import time
from pathlib import Path

from actors.scheduler.defaults import DEFAULT_CAPACITY, DEFAULT_MAX_STEPS
from ops.cli import kit
from ops.console import say
from streams.errors import StackError

ROLLOUTS = ("scripted", "random", "llm")
DEFAULT_SAMPLES = 8


def add_difficulty(commands: kit.Subparsers) -> None:
    command = kit.command(
        commands,
        "difficulty",
        "measure each task's pass rate with a policy version and record it for a run's scheduler",
        description="Run K episodes of each task with policy version VERSION through the real pipeline "
        "(a run of its own, `difficulty-<hash>` of the task versions, VERSION and K unless --run: one "
        "worker of each kind, no guard; started again, it resumes), count a pass where the reward is the "
        "pass reward (1.0), and write one TaskDifficulty per task (samples, passes, pass rate, bucket: "
        "never 0, hard <= 1/3, medium <= 2/3, easy < 1, always 1) on the tasks topic of the run that will "
        "train on them (--for-run RUN: `RUN.tasks`, where `trialog run start --run RUN` publishes its "
        "tasks and its scheduler reads them). With --from-run RUN it measures nothing: it counts RUN's "
        "trajectories instead. Training then draws tasks by --bucket-weights and retires the always / "
        "never solved ones (see `trialog run start --help`). Progress on stderr.",
        handler=_cmd_difficulty,
        examples=(
            "trialog tasks difficulty examples/tasks --policy 0 --samples 8 --rollout llm --for-run train-1",
            "trialog tasks difficulty examples/tasks --policy 3 --samples 4 --rollout llm "
            "--versions-run train-1 --for-run train-2 --json",
            "trialog tasks difficulty --from-run eval-7 --policy 3 --for-run train-1",
        ),
    )
    command.add_argument(
        "tasks", type=Path, nargs="*", metavar="DIR",
        help="task folders or folders of them (with --from-run: only these tasks, at these versions)",
    )  # fmt: skip
    command.add_argument(
        "--policy", type=kit.non_negative_int, required=True, metavar="VERSION",
        help="the policy version measured (recorded in every episode and measurement; 0: the base model)",
    )  # fmt: skip
    command.add_argument(
        "--samples", type=kit.positive_int, default=DEFAULT_SAMPLES, metavar="K", help="episodes per task"
    )
    command.add_argument(
        "--rollout", choices=ROLLOUTS, default="llm",
        help="the rollout workers' policy plugin (scripted and random are for tests and checks)",
    )  # fmt: skip
    command.add_argument(
        "--versions-run", metavar="RUN",
        help="llm: load VERSION from RUN.policy.versions (default: --for-run); version 0 loads no weights",
    )  # fmt: skip
    command.add_argument(
        "--rollout-arg", action="append", default=[], metavar="ARG",
        help="an extra argument for the rollout worker, e.g. --rollout-arg=--batch=4 (repeatable)",
    )  # fmt: skip
    command.add_argument(
        "--run",
        type=kit.run_id,
        help="the measuring run's id (default: difficulty-<hash> of what is measured)",
    )
    command.add_argument(
        "--from-run", type=kit.run_id, metavar="RUN",
        help="measure nothing: count the trajectories RUN already has",
    )  # fmt: skip
    command.add_argument(
        "--for-run", type=kit.run_id, default="", metavar="RUN",
        help="the run whose tasks topic gets the measurements (default: the default run's, `tasks`)",
    )  # fmt: skip
    command.add_argument(
        "--capacity", type=kit.positive_int, default=DEFAULT_CAPACITY, metavar="N",
        help="most measuring episodes in flight at once",
    )  # fmt: skip
    command.add_argument(
        "--max-steps", type=kit.positive_int, default=DEFAULT_MAX_STEPS, metavar="N",
        help="actions per episode, submit included",
    )  # fmt: skip
    kit.add_json(command, "print one JSON document: each task's samples, passes, pass rate and bucket")
    kit.add_bootstrap(command)


def _cmd_difficulty(args: argparse.Namespace) -> int:
    from actors.tasks.spec import TaskError, load_tasks
    from ops import task_difficulty as measure

    if args.from_run is None and not args.tasks:
        raise StackError("name the task folders to measure (DIR), or a run to count with --from-run RUN",
                         "see trialog tasks difficulty --help")  # fmt: skip
    if args.from_run is not None and args.run is not None:
        raise StackError("--run names a run to measure in, --from-run one that already ran: give one",
                         "drop --run or --from-run")  # fmt: skip
    try:
        tasks = load_tasks(args.tasks)
    except TaskError as exc:
        raise StackError(str(exc), "fix the task folders given as DIR") from None
    versions = {task.id: task.version for task in tasks} if tasks else None
    bootstrap = kit.require_kafka(kit.bootstrap_of(args))
    started = time.monotonic()
    if args.from_run is not None:
        run = args.from_run
    else:
        run = args.run or measure.measuring_run(((t.id, t.version) for t in tasks), args.policy, args.samples)
        _run_episodes(args, bootstrap, run, [task.root for task in tasks])
    found = measure.measurements(
        measure.read_trajectories(bootstrap, run), run, args.policy, measure.origin(), versions
    )
    if not found:
        raise StackError(
            f"run {run!r} has no trajectories to count", "name a run that ran: trialog run status RUN"
        )
    topic = measure.write_difficulties(bootstrap, args.for_run, [m.record for m in found])
    say(f"difficulty: wrote {len(found)} measurements on {topic} [{time.monotonic() - started:.1f} s]")
    if args.json:
        document = {
            "measured_by": run,
            "for_run": args.for_run,
            "topic": topic,
            "policy_version": args.policy,
            "tasks": [m.to_json() for m in found],
        }
        print(json.dumps(document, indent=2))
    else:
        for m in found:
            print(m.line())
    return kit.EXIT_OK


def _run_episodes(args: argparse.Namespace, bootstrap: str, run: str, folders: list[Path]) -> None:
    """K episodes of each task in `run`, through one worker of each kind, until all ended."""
    from actors.scheduler.core import Target
    from actors.scheduler.worker import SchedulerSettings
    from actors.tasks.publish import publish_tasks
    from ops.cli.run import schedule_beside
    from ops.paths import Paths
    from ops.run_workers import Workers, worker_commands
    from ops.stack.images import sandbox_ref
    from ops.stores import open_objects

    kit.require_docker()
    paths = Paths.from_env()
    publication = publish_tasks(folders, bootstrap, open_objects(paths=paths), str(sandbox_ref()), run=run)
    if publication.rejected:
        say(f"difficulty: {len(publication.rejected)} tasks rejected in review, not measured")
    published, folders = publication.published, list(publication.folders)
    say(f"difficulty: run {run}, {len(published)} tasks x {args.samples} episodes with policy {args.policy}")
    rollout_args = list(args.rollout_arg)
    if args.rollout == "llm" and args.policy > 0:
        rollout_args += [
            "--versions-run",
            args.versions_run or args.for_run,
            "--pin-version",
            str(args.policy),
        ]
    # Round robin, one group of K per task: every task gets exactly K episodes.
    target = Target(
        run_id=run,
        episodes=args.samples * len(published),
        group_size=args.samples,
        capacity=args.capacity,
        max_steps=args.max_steps,
        policy_version=args.policy,
        round_robin=True,
    )
    workers = Workers(paths.component("runs") / run / "logs")
    workers.start(worker_commands(run, bootstrap, args.rollout, folders, paths, rollout_args, guard=False))
    try:
        code = schedule_beside(
            workers, SchedulerSettings(bootstrap, target), f"{socket.gethostname()}-{os.getpid()}"
        )
    finally:
        codes = workers.stop()
        say(f"difficulty: run {run}: workers stopped {codes}")
    if code != 0:
        raise StackError(
            f"the measuring run {run} did not finish (its workers' logs: {workers.logs})",
            "run the same command again: it resumes the run",
        )
