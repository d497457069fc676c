"""`trialog worker scheduler`: start a run's episodes on `episode.commands` until N of them have ended.

`register(workers)` adds the `scheduler` command to a `worker` command group. The scheduler keeps at most
`--capacity` episodes in flight (backpressure), starts them in groups of `--group-size` on one task
(tasks drawn from the run's `tasks` topic with `--seed`), survives a restart without starting extra
episodes (it reads its earlier commands back), prints progress on stderr and exits 0 when done.
"""

from __future__ import annotations

import argparse
import os
import socket
from typing import TYPE_CHECKING

from actors.scheduler.defaults import DEFAULT_CAPACITY, DEFAULT_GROUP_SIZE, DEFAULT_MAX_STEPS
from ops.telemetry import config as telemetry_config

if TYPE_CHECKING:
    from actors.scheduler.core import Target


def add_target_arguments(command: argparse.ArgumentParser) -> None:
    """--capacity, --group-size, --seed, --max-steps (shared with `trialog run start`)."""
    command.add_argument(
        "--capacity", type=int, default=DEFAULT_CAPACITY,
        help=f"most episodes in flight at once (default {DEFAULT_CAPACITY})",
    )  # fmt: skip
    command.add_argument(
        "--group-size", type=int, default=DEFAULT_GROUP_SIZE,
        help=f"episodes per task in a row, for group-relative advantages (default {DEFAULT_GROUP_SIZE})",
    )  # fmt: skip
    command.add_argument("--seed", type=int, default=0, help="seed of the task draw (default 0)")
    command.add_argument(
        "--round-robin", action="store_true",
        help="give groups the tasks in turn (sorted by id) instead of drawing them: every task equally",
    )  # fmt: skip
    command.add_argument(
        "--max-steps", type=int, default=DEFAULT_MAX_STEPS,
        help=f"actions per episode, submit included (default {DEFAULT_MAX_STEPS})",
    )  # fmt: skip


def register(workers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    text = "start a run's episodes on episode.commands (backpressure: --capacity) until N have ended"
    command = workers.add_parser("scheduler", help=text, description=text)
    command.add_argument("--run", default="", help="the run's topic prefix (default: none)")
    command.add_argument("--episodes", type=int, required=True, help="how many episodes the run has")
    add_target_arguments(command)
    command.add_argument("--bootstrap", help="Kafka bootstrap servers (default: the local stack's broker)")
    command.add_argument("--instance", default=f"{socket.gethostname()}-{os.getpid()}", help="worker name")
    telemetry_config.add_arguments(command)
    command.set_defaults(handler=_cmd_worker_scheduler)


def target_from_args(args: argparse.Namespace) -> Target:
    """The run's target from the options; ValueError when they make none."""
    from actors.scheduler.core import Target

    return Target(
        run_id=args.run,
        episodes=args.episodes,
        group_size=args.group_size,
        capacity=args.capacity,
        seed=args.seed,
        max_steps=args.max_steps,
        round_robin=args.round_robin,
    )


def _cmd_worker_scheduler(args: argparse.Namespace) -> int:
    from actors.scheduler.worker import SchedulerSettings, run_scheduler
    from ops.paths import Paths
    from ops.stack.stack import StackConfig
    from ops.telemetry.setup import start_from_args
    from streams.errors import StackError

    try:
        target = target_from_args(args)
    except ValueError as exc:
        raise StackError(f"trialog worker scheduler: {exc}", "fix the options") from None
    bootstrap = args.bootstrap or StackConfig.load(Paths.from_env()).kafka.bootstrap
    start_from_args(args, "trialog-scheduler")
    return run_scheduler(SchedulerSettings(bootstrap, target), args.instance)
