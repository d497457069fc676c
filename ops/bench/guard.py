"""`trialog bench guard`: how fast the guard catches a broken verifier, and what its canaries cost.

A real run on the local stack (Kafka from `trialog up`, Docker sandboxes): the example tasks, the scripted
policy solving them, one worker of each kind as `run start --spawn` starts them (the guard included), and
the run's pin with the guard settings given here (by default the defaults of `run start`). After
`--honest-min` minutes of honest grading, the verifier is replaced by one that passes everything
(`--fault pass-all`). Measured, side by side in one run:

* the time from the broken verifier's first grade to the run's pause, and the canary rounds it graded;
* the canaries' share of the grading time (the verifiers' reported busy time: canaries over everything)
  and of the wall time of one verifier, in the honest phase;
* the canary rounds per minute achieved, against the rate asked for.
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
import uuid
from pathlib import Path

from ops.bench.report import cpu_model, write_section
from ops.cli import kit
from ops.console import say
from ops.paths import REPO_ROOT

DEFAULT_TASKS = ("easy-fix-add", "easy-fix-is-even")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from actors.guard.pinning import DEFAULT_CANARIES_PER_MINUTE, DEFAULT_MAX_CANARY_SHARE

    parser.add_argument(
        "--tasks", nargs="+", type=Path, metavar="DIR",
        default=[REPO_ROOT / "examples" / "tasks" / name for name in DEFAULT_TASKS],
        help="task folders (the scripted policy solves them)",
    )  # fmt: skip
    parser.add_argument(
        "--canaries-per-minute",
        type=kit.non_negative_float,
        metavar="R",
        default=DEFAULT_CANARIES_PER_MINUTE,
        help="the guard's rate",
    )
    parser.add_argument(
        "--max-canary-share",
        type=kit.fraction,
        metavar="F",
        default=DEFAULT_MAX_CANARY_SHARE,
        help="the canaries' cap",
    )
    parser.add_argument(
        "--honest-min",
        type=kit.positive_float,
        metavar="M",
        default=3.0,
        help="minutes of honest grading before the swap",
    )
    parser.add_argument("--timeout-min", type=kit.positive_float, metavar="M", default=10.0,
                        help="give up when the pause has not come this long after the swap")  # fmt: skip
    kit.add_bootstrap(parser)
    kit.add_record(parser, REPO_ROOT / "BENCHMARKS.md", "guard")


def run(args: argparse.Namespace) -> int:
    from actors.guard.control import fold
    from actors.scheduler.core import Target
    from actors.scheduler.worker import SchedulerProcess, SchedulerSettings
    from actors.tasks.publish import publish_tasks
    from ops.paths import Paths
    from ops.run_pin import image_version, pin_run
    from ops.run_workers import Workers, worker_commands
    from ops.stack.images import sandbox_ref
    from ops.stores import open_objects
    from schemas.canaries import CanaryGraded
    from schemas.events import RewardAssigned
    from schemas.origin import Origin
    from schemas.run_control import GuardSettings, RunPaused
    from schemas.topics import CANARY_GRADES, CANARY_RESULTS, RUN_CONTROL, VERIFY_RESULTS
    from streams.kafka.reader import read_to_end
    from streams.kafka.topics import ensure_topics

    bootstrap = kit.require_kafka(kit.bootstrap_of(args))
    engine = kit.require_docker()
    run_id = f"bench-guard-{uuid.uuid4().hex[:6]}"
    guard = GuardSettings(args.canaries_per_minute, args.max_canary_share, True, True)
    with tempfile.TemporaryDirectory(prefix="trialog-bench-guard-") as scratch:
        paths = Paths(Path(scratch) / "home", Paths.from_env().cache)
        ensure_topics(bootstrap, run_id)
        image = str(sandbox_ref())
        publish_tasks(args.tasks, bootstrap, open_objects(paths=paths), image, run=run_id)
        pin = pin_run(bootstrap, run_id, args.tasks, image_version(engine, image), guard)
        commands = worker_commands(run_id, bootstrap, "scripted", args.tasks, paths)
        workers = Workers(Path(scratch) / "logs")
        workers.start(commands)
        target = Target(run_id, episodes=100_000, group_size=2, capacity=2, round_robin=True)
        scheduler = SchedulerProcess(
            SchedulerSettings(bootstrap, target), Origin.system("scheduler", "bench"), say=lambda _: None
        )
        thread = threading.Thread(target=scheduler.run, daemon=True)
        thread.start()

        def read(*bases: str) -> list[object]:
            topics = [t.of(run_id) for t in (RUN_CONTROL, CANARY_GRADES, CANARY_RESULTS, VERIFY_RESULTS)
                      if t.name in bases]  # fmt: skip
            return [value for _topic, value in read_to_end(bootstrap, topics)]

        try:
            started = time.time()
            say(f"bench guard {run_id}: honest grading for {args.honest_min:g} min")
            time.sleep(args.honest_min * 60)
            honest_end_us = time.time_ns() // 1000
            honest = [
                g for g in read(VERIFY_RESULTS.name, CANARY_RESULTS.name) if isinstance(g, RewardAssigned)
            ]
            canary_ids = {
                g.meta.episode_id for g in read(CANARY_RESULTS.name) if isinstance(g, RewardAssigned)
            }
            honest_canary_us = sum(g.duration_us for g in honest if g.meta.episode_id in canary_ids)
            honest_all_us = sum(g.duration_us for g in honest)
            honest_rounds = len(canary_ids)
            say(f"bench guard: {honest_rounds} canaries graded; swapping in a pass-all verifier")
            workers.kill("verifier")
            workers.start({"verifier": [*commands["verifier"], "--fault", "pass-all"]})
            give_up = time.monotonic() + args.timeout_min * 60
            paused: RunPaused | None = None
            while paused is None and time.monotonic() < give_up:
                time.sleep(2)
                state = fold(run_id, read(RUN_CONTROL.name))
                paused = state.paused
            if paused is None:  # given up
                raise SystemExit(
                    f"no pause within {args.timeout_min:g} min of the swap (logs: {workers.logs})"
                )

            def by_broken(record: object) -> bool:
                versions = getattr(record, "versions", None)
                return versions is not None and versions.verifier != pin.verifier

            everything = read(VERIFY_RESULTS.name, CANARY_RESULTS.name)
            broken = [g for g in everything if isinstance(g, RewardAssigned) and by_broken(g)]
            first_us = min(g.meta.occurred_at_us for g in broken)
            paused_us = paused.meta.occurred_at_us
            caught = [
                c for c in read(CANARY_GRADES.name)
                if isinstance(c, CanaryGraded) and by_broken(c) and c.graded_at_us <= paused_us
            ]  # fmt: skip
        finally:
            scheduler.stopping.set()
            thread.join(timeout=30)
            workers.stop()
    honest_s = (honest_end_us / 1e6) - started
    figures = {
        "to_pause_s": (paused.meta.occurred_at_us - first_us) / 1e6,
        "broken_rounds": len(caught),
        "broken_episode_grades": len([g for g in broken if g.meta.episode_id not in canary_ids]),
        "share_of_grading": honest_canary_us / max(honest_all_us, 1),
        "share_of_one_verifier": honest_canary_us / 1e6 / honest_s,
        "rounds_per_min": honest_rounds / (honest_s / 60),
    }
    section = _render(args, figures)
    print(section)
    if not args.no_record:
        write_section(args.record, section)
        say(f"wrote {args.record}")
    return 0


def _render(args: argparse.Namespace, f: dict[str, float]) -> str:
    return "\n".join(
        [
            "## guard",
            "",
            f"- date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}",
            f"- machine: {cpu_model()}",
            f"- command: `trialog bench guard --canaries-per-minute {args.canaries_per_minute:g} "
            f"--max-canary-share {args.max_canary_share:g} --honest-min {args.honest_min:g}`",
            "- one worker of each kind, scripted policy, 2 episodes in flight; after the honest phase the "
            "verifier is replaced by one that passes everything",
            "",
            "| measure | value |",
            "| --- | ---: |",
            f"| broken verifier's first grade to the run's pause | {f['to_pause_s']:.1f} s |",
            f"| canaries it graded until the pause | {f['broken_rounds']:.0f} |",
            f"| episodes it graded until the pause (all quarantined) | {f['broken_episode_grades']:.0f} |",
            f"| canary grading time over all grading time (honest phase; an episode whose tree was graded "
            f"before is answered from the cache in no time) | {100 * f['share_of_grading']:.1f} % |",
            f"| canary grading time over the honest phase's wall time, one verifier (the cap, "
            f"{100 * args.max_canary_share:g} %, holds over any 10 minutes: a shorter phase still shows the "
            f"window's first allowance) | {100 * f['share_of_one_verifier']:.1f} % |",
            f"| canary rounds per minute (honest phase; asked for: {args.canaries_per_minute:g}) | "
            f"{f['rounds_per_min']:.2f} |",
        ]
    )
