"""`trialog demo`: the main job. Stack, model, validated tasks, v0 evaluated, training, vN evaluated.

Prints live progress on stderr and, at the end, the held-out pass rate of the first and the last policy
version with one honest sentence about the difference, where the run report and the traces are, and
writes everything it measured to `demo.json` in the demo's folder (`$TRIALOG_HOME/demo/<name>/`).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from actors.tasks.toy import Variant
from ops.cli import kit
from ops.console import say
from ops.paths import REPO_ROOT, Paths

if TYPE_CHECKING:
    from collections.abc import Iterator

    from ops.demo.run import DemoSettings


def register(subparsers: kit.Subparsers) -> None:
    demo = kit.command(
        subparsers,
        "demo",
        "the main job: a short training run on the local stack, evaluated before and after on held-out tasks",
        description=__doc__,
        handler=_cmd_demo,
        examples=(
            "trialog demo --minutes 10",
            "trialog demo --minutes 2 --toy-count 8 --toy-variant shown --name quick --json",
        ),
    )
    demo.add_argument(
        "--minutes",
        type=kit.positive_float,
        metavar="N",
        default=18.0,
        help="training time budget (with set-up and three evaluations, about 25 minutes in all on 2 cores)",
    )
    demo.add_argument(
        "--toy-count", type=kit.positive_int, metavar="N", default=16, help="toy tasks, a quarter held out"
    )
    demo.add_argument(
        "--toy-variant",
        choices=[variant.value for variant in Variant],
        default="blind",
        help="toy tasks (actors/tasks/toy.py): blind names the function only; shown also shows the file, "
        "where SmolLM2 passes about half the time (see BENCHMARKS.md, learning)",
    )
    demo.add_argument(
        "--group-size", type=kit.positive_int, metavar="N", default=8, help="episodes per task per group"
    )
    demo.add_argument(
        "--capacity", type=kit.positive_int, metavar="N", default=8, help="episodes in flight at once"
    )
    demo.add_argument(
        "--rollouts",
        type=kit.positive_int,
        metavar="N",
        default=1,
        help="rollout worker processes during training (one consumer group; one torch thread each); "
        "on 2 cores two were measured slower than one (BENCHMARKS.md, learning: pipeline against the loop)",
    )
    demo.add_argument(
        "--backend",
        choices=("torch", "vllm"),
        default="torch",
        help="the rollout's generation backend (vllm needs a GPU and the `gpu` extra)",
    )
    demo.add_argument(
        "--batch-linger-ms",
        type=kit.non_negative_int,
        metavar="MS",
        default=0,
        help="how long the rollout holds a batch open for --rollout-batch requests (0: answer what one "
        "poll brings; on 2 cores a linger was measured no faster, BENCHMARKS.md demo)",
    )
    demo.add_argument(
        "--rollout-batch",
        type=kit.positive_int,
        metavar="N",
        default=8,
        help="requests per batched generate while training (at most --capacity); below the capacity, one "
        "batch generates while the others' episodes are in their sandboxes and verifiers",
    )
    demo.add_argument(
        "--eval-capacity",
        type=kit.positive_int,
        metavar="N",
        default=16,
        help="evaluation episodes in flight at once (no learner competes then: bigger rollout batches)",
    )
    demo.add_argument(
        "--eval-per-task",
        type=kit.positive_int,
        metavar="N",
        default=16,
        help="evaluation episodes per held-out task (the same seeds for every version evaluated)",
    )
    demo.add_argument(
        "--eval-versions",
        type=kit.positive_int,
        metavar="N",
        default=3,
        help="policy versions evaluated on the held-out tasks: v0, the last, and N-2 evenly between",
    )
    demo.add_argument(
        "--max-steps",
        type=kit.positive_int,
        metavar="N",
        default=1,
        help="actions per episode (a toy task needs one: write the file)",
    )
    demo.add_argument(
        "--max-new-tokens", type=kit.positive_int, metavar="N", default=48, help="tokens per reply"
    )
    demo.add_argument(
        "--lora-rank",
        type=kit.non_negative_int,
        metavar="N",
        default=8,
        help="LoRA rank; 0 trains every weight",
    )
    demo.add_argument(
        "--temperature", type=kit.positive_float, metavar="N", default=0.7, help="sampling temperature"
    )
    demo.add_argument(
        "--seed", type=kit.non_negative_int, metavar="N", default=0, help="seed of the task draw and sampling"
    )
    demo.add_argument(
        "--name", type=kit.identifier, help="the demo's name, prefix of its runs (default: demo-<hex>)"
    )
    demo.add_argument(
        "--out", type=Path, metavar="DIR",
        help="folder for its tasks, demo.json and the run report (default: $TRIALOG_HOME/demo/NAME)",
    )  # fmt: skip
    kit.add_json(demo, "print the summary as one JSON document")


@contextmanager
def _phase(name: str, timings: dict[str, float]) -> Iterator[None]:
    say(f"==> {name}")
    started = time.monotonic()
    yield
    timings[name] = round(time.monotonic() - started, 1)
    say(f"==> {name}: {timings[name]} s")


def settings_from_args(args: argparse.Namespace) -> DemoSettings:
    """The demo's settings; every value was checked when the command line was parsed."""
    from ops.demo.run import DemoSettings

    return DemoSettings(
        name=args.name or f"demo-{uuid.uuid4().hex[:6]}",
        minutes=args.minutes,
        toy_count=args.toy_count,
        toy_variant=args.toy_variant,
        group_size=args.group_size,
        capacity=args.capacity,
        eval_capacity=args.eval_capacity,
        rollouts=args.rollouts,
        batch_linger_ms=args.batch_linger_ms,
        rollout_batch=args.rollout_batch,
        backend=args.backend,
        eval_per_task=args.eval_per_task,
        eval_versions=args.eval_versions,
        max_steps=args.max_steps,
        max_new_tokens=args.max_new_tokens,
        lora_rank=args.lora_rank,
        seed=args.seed,
        temperature=args.temperature,
    )


def _cmd_demo(args: argparse.Namespace) -> int:
    from learner.model import prepare_model
    from ops.demo.run import Stage, assemble_tasks, evaluate, train, versions_to_evaluate
    from ops.demo.summary import DemoSummary
    from ops.run_workers import validate_tasks
    from ops.stack.stack import StackConfig, up

    settings = settings_from_args(args)
    paths = Paths.from_env()
    folder: Path = args.out or paths.component("demo") / settings.name
    timings: dict[str, float] = {}
    config = StackConfig.load(paths)
    with _phase("local stack up", timings):
        up(config)
    with _phase("policy model", timings):
        model = prepare_model(paths.cache)
    with _phase("tasks: import and validate", timings):
        tasks = assemble_tasks(folder / "tasks", settings)
        validate_tasks([*tasks.train, *tasks.heldout])
    stage = Stage(paths, config.kafka.bootstrap, model, settings)
    name = settings.name
    with _phase("evaluation of v0 on the held-out tasks", timings):
        before = evaluate(stage, f"{name}-eval-v0", tasks.heldout, version=0, versions_run=None)
        say(f"   {before.line()}")
    with _phase(f"training for {settings.minutes:g} min", timings):
        training = train(stage, f"{name}-train", tasks.train)
        say(f"   published versions {training.versions or 'none'}")
        for line in training.lines():
            say(f"   {line}")
    between = []
    for version in versions_to_evaluate(training.versions, settings.eval_versions):
        with _phase(f"evaluation of v{version} on the held-out tasks", timings):
            between.append(
                evaluate(stage, f"{name}-eval-v{version}", tasks.heldout, version=version,
                         versions_run=training.run)
            )  # fmt: skip
            say(f"   {between[-1].line()}")
    last = training.versions[-1] if training.versions else 0
    with _phase(f"evaluation of v{last} on the held-out tasks", timings):
        after = evaluate(
            stage, f"{name}-eval-v{last}", tasks.heldout, version=last,
            versions_run=training.run if last else None,
        )  # fmt: skip
        say(f"   {after.line()}")
    summary = DemoSummary(
        before, training, after, timings, traces=config.jaeger.query_url, between=tuple(between)
    )
    # The summary first: the report charts its held-out curve.
    (folder / "demo.json").write_text(json.dumps(summary.to_json(), indent=2) + "\n")
    report = _report(training.run, folder / "report", folder / "demo.json", say)
    summary = dataclasses.replace(summary, report=str(report or ""))
    (folder / "demo.json").write_text(json.dumps(summary.to_json(), indent=2) + "\n")
    _print_summary(summary, folder, as_json=args.json)
    return 0


def _report(run: str, out: Path, heldout: Path, say: Callable[[str], None]) -> Path | None:
    """The training run's report page (`trialog report`, with the held-out curve of `heldout`), or None
    when it could not be written."""
    from ops.cli.report import PAGE

    argv = [sys.executable, "-m", "ops.cli", "report", run, "--out", str(out), "--heldout", str(heldout)]
    done = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        say(f"the run report could not be written ({done.stderr.strip()[-300:]})")
        return None
    return out / PAGE


def _print_summary(summary: object, folder: Path, *, as_json: bool) -> None:
    from ops.demo.summary import DemoSummary

    assert isinstance(summary, DemoSummary)
    if as_json:
        print(json.dumps(summary.to_json(), indent=2))
        return
    t = summary.training
    print(f"training {t.run}: {t.episodes_ended} episodes ended ({t.completed} completed, {t.passed} passed, "
          f"failed {t.failed_by_class or 0}); versions {t.versions or 'none'}; "
          f"{t.trajectories_trained} trajectories trained")  # fmt: skip
    print(f"before: {summary.before.line()}")
    for middle in summary.between:
        print(f"        {middle.line()}")
    print(f"after:  {summary.after.line()}")
    print(summary.verdict())
    print(f"summary: {folder / 'demo.json'}")
    print(f"run report: {summary.report or '(not written)'}")
    print(f"traces: {summary.traces} (Jaeger; service names trialog-*, one trace per episode)")
