"""`trialog bench process-rewards`: what grading intermediate workspaces costs, side by side.

Two runs on the local stack (Kafka from `trialog up`, Docker sandboxes), one after the other, alike but for
the streams worker's step grading: `--grade-steps off`, then the mode asked for (`every` by default). The
scripted policy plays five turns per episode on each task: look around (`ls`), apply the reference
solution, note the time in a new file (so that every episode's workspace differs from there on, as a
policy's do), list the folder again, submit. Measured for each run:

* episode latency (EpisodeStarted to EpisodeCompleted), median and 95th percentile, and the run's wall time
  and episodes per minute: the step grades must not be on the critical path;
* the grading load: final grades and process grades, their count, their summed grading time (the
  verifiers' own `duration_us`), and how many process grades were answered from the verifier's cache.

One verifier worker serves both the final and the process grades, on the same cores: what an operator
would see before giving process grades verifiers of their own (a consumer group of their own already).
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime as dt
import json
import os
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Sequence
from pathlib import Path

from ops.bench.report import cpu_model, memory_gib, write_section
from ops.cli import kit
from ops.console import say
from ops.paths import REPO_ROOT

DEFAULT_TASKS = ("easy-fix-add", "easy-fix-range")
SECTION = "## process rewards"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--tasks", nargs="+", type=Path, metavar="DIR",
        default=[REPO_ROOT / "examples" / "tasks" / name for name in DEFAULT_TASKS],
        help="task folders (the scripted policy plays five turns on each, the solution among them)",
    )  # fmt: skip
    parser.add_argument("--episodes", type=kit.positive_int, metavar="N", default=24, help="episodes per run")
    parser.add_argument(
        "--capacity", type=kit.positive_int, metavar="N", default=4, help="episodes in flight"
    )
    parser.add_argument(
        "--grade-steps", default="every", metavar="MODE",
        help="the second run's step grading (every, every:K, changed)",
    )  # fmt: skip
    parser.add_argument("--timeout-min", type=kit.positive_float, metavar="M", default=15.0,
                        help="give up on a run after this long")  # fmt: skip
    kit.add_bootstrap(parser)
    kit.add_record(parser, REPO_ROOT / "BENCHMARKS.md", "process rewards")


@dataclasses.dataclass(frozen=True)
class Measured:
    mode: str
    wall_s: float
    latencies_s: list[float]
    final_grades: int
    final_grading_s: float
    process_grades: int
    process_grading_s: float
    process_cached: int

    @property
    def per_minute(self) -> float:
        return len(self.latencies_s) / self.wall_s * 60 if self.wall_s else 0.0


def scripts(tasks: Sequence[Path]) -> dict[str, list[dict[str, str]]]:
    """Five turns per task: look, solve, note, look again, submit."""
    from actors.tasks.spec import load_task

    plays: dict[str, list[dict[str, str]]] = {}
    for folder in tasks:
        task = load_task(folder)
        diff = (folder / "solution.patch").read_text()
        plays[task.id] = [
            {"tool": "run", "command": "ls"},
            {"tool": "apply_patch", "diff": diff},
            # A note of this moment: every episode's workspace differs from here on, as an RL policy's do
            # (identical trees would all be answered from the verifier's grade cache).
            {"tool": "run", "command": "date +%s%N > NOTES.txt"},
            {"tool": "run", "command": "ls -la"},
            {"tool": "submit", "message": "done"},
        ]
    return plays


def run(args: argparse.Namespace) -> int:
    from streams.step_grading import StepGrading

    try:
        mode = str(StepGrading.parse(args.grade_steps))
    except ValueError as exc:
        raise SystemExit(f"--grade-steps: {exc}") from None
    if mode == "off":
        raise SystemExit("--grade-steps: the second run must grade steps (every, every:K or changed)")
    bootstrap = kit.require_kafka(kit.bootstrap_of(args))
    kit.require_docker()
    started = time.monotonic()
    results = [_one_run(args, bootstrap, grading) for grading in ("off", mode)]
    section = render(args, results, time.monotonic() - started)
    print(section)
    if not args.no_record:
        write_section(args.record, section)
    return 0


def _one_run(args: argparse.Namespace, bootstrap: str, grading: str) -> Measured:
    from actors.scheduler.core import Target
    from actors.scheduler.worker import SchedulerProcess, SchedulerSettings
    from actors.tasks.publish import publish_tasks
    from ops.paths import Paths
    from ops.run_workers import Workers, worker_commands
    from ops.stack.images import sandbox_ref
    from ops.stores import open_objects
    from schemas.events import EpisodeCompleted, EpisodeStarted, RewardAssigned
    from schemas.origin import Origin
    from schemas.progress import StepGraded
    from schemas.topics import EPISODE_EVENTS, PROGRESS_RESULTS, VERIFY_RESULTS
    from streams.kafka.reader import read_to_end
    from streams.kafka.topics import ensure_topics

    run_id = f"bench-progress-{grading.replace(':', '')}-{uuid.uuid4().hex[:6]}"
    with tempfile.TemporaryDirectory(prefix="trialog-bench-progress-") as scratch:
        paths = Paths(Path(scratch) / "home", Paths.from_env().cache)
        actions = Path(scratch) / "actions.json"
        actions.write_text(json.dumps(scripts(args.tasks)))
        ensure_topics(bootstrap, run_id)
        publish_tasks(args.tasks, bootstrap, open_objects(paths=paths), str(sandbox_ref()), run=run_id)
        commands = worker_commands(
            run_id, bootstrap, "scripted", args.tasks, paths, ["--actions", str(actions)],
            guard=False, grade_steps=grading,
        )  # fmt: skip
        workers = Workers(Path(scratch) / "logs")
        workers.start(commands)
        target = Target(
            run_id, episodes=args.episodes, group_size=2, capacity=args.capacity, round_robin=True
        )
        scheduler = SchedulerProcess(
            SchedulerSettings(bootstrap, target), Origin.system("scheduler", "bench"), say=lambda _: None
        )
        say(f"bench process-rewards {run_id}: {args.episodes} episodes, --grade-steps {grading}")
        begun = time.monotonic()
        thread = threading.Thread(target=scheduler.run, daemon=True)
        thread.start()
        try:
            thread.join(timeout=args.timeout_min * 60)
            if thread.is_alive():
                raise SystemExit(
                    f"the {grading} run did not end within {args.timeout_min:g} min ({workers.logs})"
                )
            wall_s = time.monotonic() - begun
            time.sleep(3.0)  # the last process grades, which nothing waits for
        finally:
            workers.stop()
        events = [v for _t, v in read_to_end(bootstrap, [EPISODE_EVENTS.of(run_id)])]
        finals = [
            v
            for _t, v in read_to_end(bootstrap, [VERIFY_RESULTS.of(run_id)])
            if isinstance(v, RewardAssigned)
        ]
        process = [
            v for _t, v in read_to_end(bootstrap, [PROGRESS_RESULTS.of(run_id)]) if isinstance(v, StepGraded)
        ]
    starts = {e.meta.episode_id: e.meta.occurred_at_us for e in events if isinstance(e, EpisodeStarted)}
    latencies = [
        (e.meta.occurred_at_us - starts[e.meta.episode_id]) / 1e6
        for e in events
        if isinstance(e, EpisodeCompleted) and e.meta.episode_id in starts
    ]
    return Measured(
        grading, wall_s, latencies, len(finals), sum(g.duration_us for g in finals) / 1e6,
        len(process), sum(g.duration_us for g in process) / 1e6, sum(g.duration_us < 50_000 for g in process),
    )  # fmt: skip


def _percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def render(args: argparse.Namespace, results: Sequence[Measured], seconds: float) -> str:
    rows = "\n".join(
        f"| `{m.mode}` | {len(m.latencies_s)} | {statistics.median(m.latencies_s):.2f} | "
        f"{_percentile(m.latencies_s, 0.95):.2f} | {m.wall_s:.0f} | {m.per_minute:.1f} | {m.final_grades} | "
        f"{m.final_grading_s:.1f} | {m.process_grades} ({m.process_cached} from cache) | "
        f"{m.process_grading_s:.1f} |"
        for m in results
    )
    off, on = results
    graded = on.final_grading_s + on.process_grading_s
    load = graded / off.final_grading_s if off.final_grading_s else float("nan")
    latency = statistics.median(on.latencies_s) / statistics.median(off.latencies_s)
    return f"""{SECTION}

`trialog bench process-rewards --episodes {args.episodes} --capacity {args.capacity} --grade-steps \
{on.mode}` on {dt.date.today().isoformat()}, {cpu_model()}, {memory_gib():.0f} GiB, {os.cpu_count()} cores; \
{seconds / 60:.1f} min in all. Two runs, one after the other, alike but for the streams worker's step \
grading; the scripted policy plays five turns per episode (look, solve, note the time in a new file, look, \
submit), so that workspaces differ between episodes from the third turn on, \
on {", ".join(p.name for p in args.tasks)}; one worker of each kind, the verifier serving final and process \
grades on the same cores.

| step grading | episodes | latency p50 s | latency p95 s | wall s | episodes/min | final grades | \
their grading s | process grades | their grading s |
| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |
{rows}

- grading time with process grades against without: {load:.2f}x; median episode latency: {latency:.2f}x
"""
