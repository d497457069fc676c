"""`trialog tasks validate`: admit a task to training only if it is well-formed, solvable and stable.

A task is `valid` when its spec loads, repo/ as given fails at least one frozen test, repo/ with
solution.patch passes all of them, and this holds in each of N runs with no run timing out. Otherwise
the verdict names the first rule broken: `invalid_spec`, `timeout`, `flaky` (outcomes differ between
runs), `already_passing`, `gold_tampers` (the gold solution raised a tamper signal: e.g. a frozen test
compares with `mock.ANY`, or uses frame introspection the harness refuses; training on such a task would
punish honest work as tampering), `gold_fails`, `unstable_ids` (the gold run reported tests other than the
trusted collection of repo/ found: the expected ids would not be the ones graded). A task whose validation
raised (a sandbox that would not start) is `error`, with the exception: it was not judged.

Before any sandbox runs, the hidden tests are read for static findings (`actors.tasks.static_checks`:
tests without an assertion or without the code under test, network, sleeps, the wall clock, unseeded
randomness). They are warnings carried in the result; with `strict_tests` a task with any is refused as
`weak_tests` without running it.

The expected ids (parametrized instances included) are those the verifier collected from the original
repo/; they are listed in the JSON report.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from actors.tasks.reward import Verdict, expected_id
from actors.tasks.spec import Task, TaskError, load_task
from actors.tasks.static_checks import Finding, check_task
from actors.tasks.verify import Verification
from sandbox_agent.scratch import owned_temp_dir


class Admission(StrEnum):
    VALID = "valid"
    INVALID_SPEC = "invalid_spec"
    ALREADY_PASSING = "already_passing"
    GOLD_FAILS = "gold_fails"
    FLAKY = "flaky"
    TIMEOUT = "timeout"
    GOLD_TAMPERS = "gold_tampers"
    UNSTABLE_IDS = "unstable_ids"
    WEAK_TESTS = "weak_tests"  # static findings on the hidden tests, refused only when asked to be strict
    ERROR = "error"  # validating it raised (a sandbox that could not start, a broken engine): not judged


@dataclass(frozen=True)
class RunOutcome:
    """What one run saw: the verdict and failing tests on repo/ as given and on repo/ + solution."""

    repo: tuple[Verdict, tuple[str, ...]]
    gold: tuple[Verdict, tuple[str, ...]]
    timed_out: bool
    seconds: float
    gold_signals: tuple[str, ...] = ()
    # gold-run ids the collection did not expect, then expected ids the gold run never reported
    id_mismatch: tuple[str, ...] = ()
    expected: tuple[str, ...] = ()


@dataclass(frozen=True)
class TaskValidation:
    path: str
    task_id: str | None
    task_version: str | None
    verdict: Admission
    reasons: tuple[str, ...]
    runs: tuple[RunOutcome, ...] = field(default=())
    seconds: float = 0.0
    findings: tuple[Finding, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {
            "task": self.task_id,
            "path": self.path,
            "version": self.task_version,
            "verdict": self.verdict.value,
            "reasons": list(self.reasons),
            "tests": list(self.runs[0].expected) if self.runs else [],
            "runs": [
                {
                    "repo": run.repo[0].value,
                    "gold": run.gold[0].value,
                    "timed_out": run.timed_out,
                    "seconds": round(run.seconds, 3),
                }
                for run in self.runs
            ],
            "seconds": round(self.seconds, 3),
            "findings": [finding.to_json() for finding in self.findings],
        }


Verifier = Callable[[Task, Path], Verification]


def judge(runs: Sequence[RunOutcome]) -> tuple[Admission, tuple[str, ...]]:
    """The verdict from the runs' outcomes (pure)."""
    if any(run.timed_out for run in runs):
        return Admission.TIMEOUT, (f"{sum(r.timed_out for r in runs)} of {len(runs)} runs timed out",)
    if len({run.repo for run in runs}) > 1 or len({run.gold for run in runs}) > 1:
        return Admission.FLAKY, ("test outcomes differ between runs",)
    repo_verdict, _ = runs[0].repo
    gold_verdict, gold_failed = runs[0].gold
    if repo_verdict is Verdict.PASS:
        return Admission.ALREADY_PASSING, ("repo/ as given already passes every frozen test",)
    signals = tuple(dict.fromkeys(signal for run in runs for signal in run.gold_signals))
    if signals:
        return Admission.GOLD_TAMPERS, tuple(f"repo/ + solution.patch raised: {s}" for s in signals[:5])
    mismatch = tuple(dict.fromkeys(test for run in runs for test in run.id_mismatch))
    if mismatch:
        return Admission.UNSTABLE_IDS, (
            "the gold run's tests differ from the trusted collection of repo/: " + ", ".join(mismatch[:5]),
        )
    if gold_verdict is not Verdict.PASS:
        failing = ", ".join(gold_failed[:5]) or gold_verdict.value
        return Admission.GOLD_FAILS, (f"repo/ + solution.patch does not pass: {failing}",)
    return Admission.VALID, ()


def validate_task(path: Path, verifier: Verifier, runs: int, *, strict_tests: bool = False) -> TaskValidation:
    """Validate the task at `path` in `runs` runs; with `strict_tests`, static findings on its hidden tests
    refuse it before anything runs."""
    started = time.monotonic()
    try:
        task = load_task(path)
    except TaskError as exc:
        return TaskValidation(str(path), None, None, Admission.INVALID_SPEC, (str(exc),))
    findings = check_task(task)
    if strict_tests and findings:
        count = f"{len(findings)} static finding{'s' if len(findings) != 1 else ''} on the hidden tests"
        kinds = ", ".join(sorted({finding.kind.value for finding in findings}))
        return TaskValidation(
            str(path), task.id, task.version, Admission.WEAK_TESTS, (f"{count} (--strict-tests): {kinds}",),
            seconds=time.monotonic() - started, findings=findings,
        )  # fmt: skip
    outcomes = tuple(_one_run(task, verifier) for _ in range(runs))
    verdict, reasons = judge(outcomes)
    return TaskValidation(
        str(path), task.id, task.version, verdict, reasons, outcomes, time.monotonic() - started, findings
    )


def _one_run(task: Task, verifier: Verifier) -> RunOutcome:
    started = time.monotonic()
    with owned_temp_dir(prefix="trialog-validate-") as scratch:
        repo = verifier(task, task.copy_repo(Path(scratch) / "repo"))
        gold = verifier(task, task.copy_repo(Path(scratch) / "gold", solved=True))
    return RunOutcome(
        (repo.grade.verdict, repo.grade.failed_tests),
        (gold.grade.verdict, gold.grade.failed_tests),
        repo.timed_out or gold.timed_out,
        time.monotonic() - started,
        gold_signals=gold.grade.tamper_signals,
        id_mismatch=id_mismatch(gold.expected, gold.reported) if gold.complete else (),
        expected=gold.expected,
    )


def id_mismatch(expected: Sequence[str], reported: Sequence[str]) -> tuple[str, ...]:
    """Reported ids that are no expected test (nor an instance of one), then expected ids never reported.

    Collection errors are reported against a file (no `::`): they are failures, not other tests.
    """
    wanted = set(expected)
    extra = [r for r in reported if "::" in r and expected_id(r, wanted) is None]
    seen = {expected_id(r, wanted) for r in reported}
    return (*extra, *(e for e in expected if e not in seen))


def validate_all(
    paths: Sequence[Path],
    verifier: Verifier,
    *,
    runs: int = 3,
    jobs: int = 2,
    strict_tests: bool = False,
    on_done: Callable[[TaskValidation], None] = lambda _: None,
) -> list[TaskValidation]:
    """Validate tasks in parallel, at most `jobs` at a time (each holds one sandbox at a time). A task whose
    validation raises gets an `error` verdict naming the exception; the others go on."""
    with ThreadPoolExecutor(max_workers=max(jobs, 1), thread_name_prefix="validate") as pool:
        futures = [pool.submit(validate_or_record, path, verifier, runs, strict_tests) for path in paths]
        results = []
        for future in futures:
            results.append(future.result())
            on_done(results[-1])
    return results


def validate_or_record(path: Path, verifier: Verifier, runs: int, strict_tests: bool) -> TaskValidation:
    """`validate_task`, or an `error` verdict naming what it raised."""
    started = time.monotonic()
    try:
        return validate_task(path, verifier, runs, strict_tests=strict_tests)
    except Exception as exc:  # one task's broken run must not end the validation of a thousand others
        reason = f"validation raised {type(exc).__name__}: {exc}"
        return TaskValidation(
            str(path), None, None, Admission.ERROR, (reason,), seconds=time.monotonic() - started
        )
