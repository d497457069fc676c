"""Faults a verifier can be told to inject, for drills and for the guard's tests: a grader that passes
everything or fails everything, as a broken acceptance script or image would.

A fault is one of the verifier's grading settings, so a faulty verifier names another verifier version
(`actors.verifier.versions.verifier_version`): the run sees the change as such, and its canaries see the
wrong grades. Errors (nothing could be graded) are left as they are: a fault changes grades, not outages.
"""

from __future__ import annotations

import dataclasses
from enum import StrEnum
from typing import TYPE_CHECKING

from actors.tasks.reward import PARTIAL_PENALTY, PASS_REWARD, Grade, Verdict

if TYPE_CHECKING:  # the CLI reads the choices without loading the verifier (and its sandbox backend)
    from actors.tasks.verify import Verification


class Fault(StrEnum):
    PASS_ALL = "pass-all"  # every workspace passes every test
    FAIL_ALL = "fail-all"  # every workspace fails every test


def inject(fault: Fault, verification: Verification) -> Verification:
    """The verification as the faulty verifier reports it."""
    grade = verification.grade
    if grade.verdict is Verdict.ERROR:
        return verification
    total = max(grade.total, 1)
    if fault is Fault.PASS_ALL:
        faulty = Grade(PASS_REWARD, Verdict.PASS, total, total, (), detail="fault injected: pass-all")
    else:
        faulty = Grade(
            0.0 - PARTIAL_PENALTY,
            Verdict.FAIL,
            0,
            total,
            grade.failed_tests or ("(every test)",),
            detail="fault injected: fail-all",
        )
    return dataclasses.replace(verification, grade=faulty)
