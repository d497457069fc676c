"""The pipeline's pure decisions: which tests are usable, which reach a mutant, what a mutant's runs say."""

from __future__ import annotations

import random

import pytest

from actors.tasks.synth.mutate import mutations
from actors.tasks.synth.pipeline import (
    Baseline,
    Candidate,
    Reject,
    function_spans,
    judge_baseline,
    judge_mutant,
    reaching_tests,
    sample_passing,
)
from actors.tasks.synth.suite import SuiteRun, TestResult, parse_run

PASS, FAIL = TestResult("passed"), TestResult("failed", "E   assert 1 == 2")
SOURCE = """LIMIT = 3


def small(x):
    return x < LIMIT


@staticmethod
def big(x):
    return x > 10
"""


def run(**outcomes: TestResult) -> SuiteRun:
    return SuiteRun({f"tests/test_a.py::{name}": result for name, result in outcomes.items()}, 1.0, True)


def test_usable_tests_passed_every_run_and_are_frozen_ids() -> None:
    first, second = run(test_x=PASS, test_y=PASS, test_z=PASS), run(test_x=PASS, test_y=FAIL, test_z=PASS)
    frozen = {"tests/test_a.py::test_x", "tests/test_a.py::test_y"}  # test_z is not one the grader sees
    baseline = judge_baseline([first, second], frozen)
    assert baseline.usable == ("tests/test_a.py::test_x",)
    assert baseline.flaky == ("tests/test_a.py::test_y",)
    assert baseline.unusable == 2
    graded = judge_baseline([first, first], frozen, graded={"tests/test_a.py::test_y"})
    assert graded.usable == ("tests/test_a.py::test_y",)  # test_x: the grader did not pass it
    with pytest.raises(RuntimeError, match="did not complete"):
        judge_baseline([first, SuiteRun({}, 0.0, False, log="killed")], frozen)


def test_a_mutant_is_run_against_the_tests_that_called_its_function() -> None:
    calls = {"tests/t.py::test_small": frozenset({"m.py:4"}), "tests/t.py::test_big": frozenset({"m.py:8"})}
    baseline = Baseline(tuple(calls), (), 0, calls, 1.0)
    spans = function_spans(SOURCE)
    by_line = {m.line: m for m in mutations(SOURCE, "m.py")}
    assert reaching_tests(by_line[5], spans, baseline) == ["tests/t.py::test_small"]
    assert reaching_tests(by_line[10], spans, baseline) == ["tests/t.py::test_big"]  # decorated: line 8
    assert reaching_tests(by_line[1], spans, baseline) == list(calls)  # module level runs at import


def test_what_a_mutants_runs_say() -> None:
    mutation = mutations(SOURCE, "m.py")[0]
    tests = ["tests/test_a.py::test_x", "tests/test_a.py::test_y"]
    one_fails = run(test_x=PASS, test_y=FAIL)
    assert judge_mutant(mutation, "", tests, [], 3) == Reject.INCOMPLETE
    assert judge_mutant(mutation, "", tests, [None], 3) == Reject.INCOMPLETE
    assert judge_mutant(mutation, "", tests, [run(test_x=PASS, test_y=PASS)], 3) == Reject.NO_FAILURE
    assert judge_mutant(mutation, "", tests, [run(test_x=FAIL, test_y=FAIL)], 1) == Reject.TOO_MANY
    assert judge_mutant(mutation, "", tests, [one_fails, run(test_x=FAIL, test_y=FAIL)], 3) == Reject.UNSTABLE
    assert judge_mutant(mutation, "", tests, [one_fails, None], 3) == Reject.UNSTABLE
    kept = judge_mutant(mutation, "", tests, [one_fails, one_fails], 3)
    assert isinstance(kept, Candidate) and kept.failing == ("tests/test_a.py::test_y",)
    missing = run(test_x=PASS)  # a test with no result did not pass
    assert isinstance(judge_mutant(mutation, "", tests, [missing, missing], 3), Candidate)


def test_the_runners_line_is_found_among_the_tests_output() -> None:
    stdout = 'noise\nTRIALOG-SUITE {"tests": {"tests/t.py::test_a": {"outcome": "failed", "error": "E x"}}}\n'
    parsed = parse_run(stdout, 2.0)
    assert parsed.complete and parsed.results["tests/t.py::test_a"] == TestResult("failed", "E x")
    assert not parse_run("killed before the end", 2.0).complete


def test_passing_tests_are_sampled_as_whole_functions_within_the_budget() -> None:
    many = [f"tests/test_a.py::test_param[{n}]" for n in range(50)]
    few = [f"tests/test_a.py::test_pair[{n}]" for n in range(2)]
    plain = [f"tests/test_b.py::test_{name}" for name in "uvwxyz"]
    for seed in range(20):
        chosen = sample_passing([*many, *few, *plain], {"tests/test_a.py"}, 5, random.Random(seed))
        assert len(chosen) == 5 and not set(chosen) & set(many)  # 50 instances never fit a budget of 5
        assert set(few) <= set(chosen)  # the failing tests' file first, and a function comes whole
    assert sample_passing(many, set(), 5, random.Random(0)) == []
    assert sample_passing(plain, set(), 0, random.Random(0)) == []
