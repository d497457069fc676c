"""The reward rule and the verdict: a pure function of what the verifier observed.

    tampered (paths or signals)   -> -1.0  tampered
    build failed                  -> -0.5  build_failed
    every frozen test passed      ->  1.0  pass
    otherwise                     ->  passed/total - 0.2   partial (some passed) or fail (none passed)

The rule only trusts what it can count. The expected test ids never come from the graded run: they are
the instances of a trusted collection of the task's original repo/ (each parametrized instance is one
test, and `total` counts instances), or, where that collection could not run, the ids read statically from
the frozen tests (a parametrized function is then one test, passed when every instance reported passed).
A test that is missing from the report, errored, was skipped or was not collected counts as failed; a run
that reports nothing earns nothing. A run that did not finish (`complete=False`: killed at the timeout, or
no completion marker) also fails every static id it saw only instances of, since the instances it never
reached cannot be counted. A task with no expected tests cannot be graded at all (verdict `error`): an
empty suite must never look like a passing one.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from schemas.fsnames import to_wire

TAMPERED_REWARD = -1.0
BUILD_FAILED_REWARD = -0.5
PASS_REWARD = 1.0
PARTIAL_PENALTY = 0.2


class Outcome(StrEnum):
    """What the harness reported for one test (or one phase of it)."""

    PASSED = "passed"
    FAILED = "failed"
    ERROR = "error"  # setup/teardown failed, or the file did not collect
    SKIPPED = "skipped"  # skipped or xfailed: not a pass, whoever asked for it


class Verdict(StrEnum):
    PASS = "pass"
    PARTIAL = "partial"
    FAIL = "fail"
    BUILD_FAILED = "build_failed"
    TAMPERED = "tampered"
    ERROR = "error"  # the verifier could not grade (infrastructure failure, task without tests)


@dataclass(frozen=True)
class Grade:
    reward: float
    verdict: Verdict
    passed: int
    total: int
    failed_tests: tuple[str, ...]
    tampered_paths: tuple[str, ...] = ()
    detail: str = ""
    # Evidence of tampering seen while the tests ran (the harness refused an introspection of its own
    # frames, a framework object was replaced, a value compared equal to everything): one line each.
    tamper_signals: tuple[str, ...] = ()

    @property
    def trainable(self) -> bool:
        """False for `error`: the reward then says nothing about the policy and must not be learned from."""
        return self.verdict is not Verdict.ERROR

    def as_dict(self) -> dict[str, Any]:
        """The fields of `trialog verify --json` (the verifier adds `duration_s`)."""
        return {
            "reward": self.reward,
            "verdict": self.verdict.value,
            "passed": self.passed,
            "total": self.total,
            "failed_tests": list(self.failed_tests),
            # The wire form: printable and reversible, whatever bytes the agent named a file with.
            "tampered_paths": [to_wire(path) for path in self.tampered_paths],
            "tamper_signals": list(self.tamper_signals),
        }


def grade(
    *,
    expected: Sequence[str],
    reports: Iterable[tuple[str, Outcome]],
    tampered_paths: Iterable[str] = (),
    tamper_signals: Iterable[str] = (),
    build_ok: bool = True,
    complete: bool = True,
) -> Grade:
    """Grade one workspace.

    `expected` are the frozen test ids; `reports` every (test id, outcome) the harness reported, in any
    order and possibly several per test (call and teardown). An expected id passes only if it was reported
    and every report for it, or for its parametrized instances `id[...]`, is PASSED.
    """
    expected_ids = tuple(dict.fromkeys(expected))
    tampered = tuple(sorted(set(tampered_paths)))
    signals = tuple(dict.fromkeys(tamper_signals))
    total = len(expected_ids)
    if tampered or signals:
        return Grade(
            TAMPERED_REWARD, Verdict.TAMPERED, 0, total, expected_ids, tampered, tamper_signals=signals
        )
    if not build_ok:
        return Grade(BUILD_FAILED_REWARD, Verdict.BUILD_FAILED, 0, total, expected_ids)
    if not total:
        return error_grade("the task has no frozen tests", total=0)
    failed = failed_tests(expected_ids, reports, complete=complete)
    passed = total - len(failed)
    if not failed:
        return Grade(PASS_REWARD, Verdict.PASS, passed, total, ())
    verdict = Verdict.PARTIAL if passed else Verdict.FAIL
    return Grade(passed / total - PARTIAL_PENALTY, verdict, passed, total, failed)


def failed_tests(
    expected: Sequence[str], reports: Iterable[tuple[str, Outcome]], *, complete: bool = True
) -> tuple[str, ...]:
    """The expected ids that did not pass, in the order of `expected`."""
    wanted = set(expected)
    seen: set[str] = set()
    bad: set[str] = set()
    folded: set[str] = set()  # static ids that were reported only through instances
    exact: set[str] = set()
    for test_id, outcome in reports:
        base = expected_id(test_id, wanted)
        if base is None:
            continue  # a report for something not frozen (cannot affect the grade)
        seen.add(base)
        (exact if base == test_id else folded).add(base)
        if outcome is not Outcome.PASSED:
            bad.add(base)
    if not complete:
        bad |= folded - exact
    return tuple(test_id for test_id in expected if test_id in bad or test_id not in seen)


def expected_id(test_id: str, wanted: set[str]) -> str | None:
    """The expected id a reported id counts for: itself, or the static id it is an instance of."""
    if test_id in wanted:
        return test_id
    # Parametrized instances: `file.py::test_x[1-2]` belongs to `file.py::test_x`. Test names cannot hold
    # '[', and frozen test paths may not either, so the first '[' starts the parameter id.
    base, bracket, _ = test_id.partition("[")
    return base if bracket and test_id.endswith("]") and base in wanted else None


def error_grade(detail: str, *, total: int = 0) -> Grade:
    """The verifier could not produce a grade (see `Grade.trainable`)."""
    return Grade(0.0, Verdict.ERROR, 0, total, (), (), detail)
