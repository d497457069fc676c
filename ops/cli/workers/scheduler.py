"""`trialog worker scheduler`: start a run's episodes on `episode.commands` until N of them have ended.

`register(workers)` adds the `scheduler` command to a `worker` command group. The scheduler keeps at most
`--capacity` episodes in flight (backpressure), starts them in groups of `--group-size` on one task
(tasks drawn from the run's `tasks` topic with `--seed`), survives a restart without starting extra
episodes (it reads its earlier commands back), prints progress on stderr and exits 0 when done; SIGTERM
or SIGINT stop it (exit 1).
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from actors.scheduler.defaults import (
    DEFAULT_CAPACITY,
    DEFAULT_GROUP_SIZE,
    DEFAULT_MAX_STEPS,
    DEFAULT_RETEST_EVERY,
)
from actors.scheduler.difficulty import BucketWeights
from ops.cli import kit

if TYPE_CHECKING:
    from actors.scheduler.core import Target
    from actors.scheduler.worker import SchedulerSettings


def add_target_arguments(command: argparse.ArgumentParser) -> None:
    """--episodes, --capacity, --group-size, --seed, --round-robin, --max-steps, --bucket-weights,
    --retest-every (shared with `run start`)."""
    add = command.add_argument
    add("--episodes", type=kit.positive_int, metavar="N", required=True, help="how many episodes the run has")
    add(
        "--capacity",
        type=kit.positive_int,
        metavar="N",
        default=DEFAULT_CAPACITY,
        help="most episodes in flight at once",
    )
    add("--group-size", type=kit.positive_int, metavar="N", default=DEFAULT_GROUP_SIZE,
        help="episodes per task in a row, for group-relative advantages")  # fmt: skip
    add("--seed", type=int, metavar="N", default=0, help="seed of the task draw")
    add("--round-robin", action="store_true",
        help="give groups the tasks in turn (sorted by id), not drawn: every task equally")  # fmt: skip
    add("--max-steps", type=kit.positive_int, metavar="N", default=DEFAULT_MAX_STEPS,
        help="actions per episode, submit included")  # fmt: skip
    add("--bucket-weights", type=bucket_weights, metavar="B=W,...", default=BucketWeights(),
        help="how often each difficulty bucket is drawn (buckets from `trialog tasks difficulty`: hard, "
        "medium, easy, unmeasured; unnamed ones keep their default), e.g. hard=2,medium=1,easy=0.5 "
        f"(default: {BucketWeights().text()})")  # fmt: skip
    add("--retest-every", type=kit.non_negative_int, metavar="N", default=DEFAULT_RETEST_EVERY,
        help="every N-th group draws among the retired tasks (always or never solved), which are not "
        "drawn otherwise; 0: never")  # fmt: skip


def bucket_weights(text: str) -> BucketWeights:
    """argparse type of --bucket-weights."""
    try:
        return BucketWeights.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def register(workers: kit.Subparsers) -> None:
    text = "start a run's episodes on episode.commands (backpressure: --capacity) until N have ended"
    command = kit.command(
        workers,
        "scheduler",
        text,
        handler=_cmd_worker_scheduler,
        examples=(
            "trialog worker scheduler --run RUN --episodes 8",
            "trialog worker scheduler --run RUN --episodes 64 --group-size 4 --capacity 16 --round-robin",
            "trialog worker scheduler --run RUN --episodes 64 --group-size 4 "
            "--bucket-weights hard=2,easy=0.5 --retest-every 8",
        ),
    )
    kit.add_run(command)
    add_target_arguments(command)
    kit.add_bootstrap(command)
    kit.add_instance(command)
    kit.add_telemetry(command)
    kit.add_lifecycle(command)


def target_of(args: argparse.Namespace, run: str) -> Target:
    """The target of `run` from the options `add_target_arguments` added (each checked when parsed)."""
    from actors.scheduler.core import Target

    return Target(
        run_id=run,
        episodes=args.episodes,
        group_size=args.group_size,
        capacity=args.capacity,
        seed=args.seed,
        max_steps=args.max_steps,
        round_robin=args.round_robin,
        bucket_weights=args.bucket_weights,
        retest_every=args.retest_every,
    )


def run_scheduler(settings: SchedulerSettings, instance: str, args: argparse.Namespace | None = None) -> int:
    """The scheduler in this process until its episodes have ended (0) or SIGTERM/SIGINT stop it (1);
    with a worker's `args`, its health endpoints and grace period too (`kit.add_lifecycle`)."""
    from actors.scheduler.worker import SchedulerProcess
    from schemas.origin import Origin

    process = SchedulerProcess(settings, Origin.system("scheduler", instance))
    if args is None:  # inside `run start`, which has no probes
        with kit.stop_on_signals(process.stopping):
            return process.run()
    with kit.worker_lifetime(args, process.stopping, process.health):
        return process.run()


def _cmd_worker_scheduler(args: argparse.Namespace) -> int:
    from actors.scheduler.worker import SchedulerSettings
    from ops.telemetry.setup import start as start_telemetry

    target = target_of(args, args.run)
    settings = SchedulerSettings(kit.bootstrap_of(args), target)
    start_telemetry(kit.telemetry_of(args, "trialog-scheduler"))
    return run_scheduler(settings, args.instance, args)
