"""Synthesis of one project: baseline runs, mutants tried one at a time, kept ones written as tasks.

1. Baseline. The suite runs `baseline_runs` times in a sandbox (the first run traced: which workspace
   functions each test calls), and each test file is graded once by the real grader (`parity`). Usable
   tests passed every time, under the grader too, and are frozen ids it sees; the ones that passed only
   sometimes are listed as flaky and never used.
2. Mutants, in `mutate.sample` order (spread over modules and operators). For each: the tests that can
   reach it (those that called the function it is in; every usable test for a mutant at module or class
   level, which runs at import), run with the mutant in place. Kept when 1 to `max_failing` of them fail,
   the rest pass, no other mutant already failed exactly that set (deduplicated), and a second run fails
   the very same set. A test that never calls the mutated function runs the same code as before, so it
   still passes: that is how "the rest still pass" is known without rerunning the whole suite per mutant.
3. Writing: the task folder (`writer.write_task`), its instruction from the failing tests only. Then,
   while the mutants go on, `validate_runs` runs of `tasks validate` with the real grader: a task that is
   not valid (a gold run that fails a varying set, ids the grader sees otherwise) is removed again.

Work is spread over `jobs` sandboxes (threads: the work is in the sandboxes), in batches of BATCH mutants
per sandbox command (pytest imported once, each run a fork). Deduplication and writing go in sample order
as the runs come in, so which of two mutants failing the same tests is kept does not depend on the
threads' timing, and a run cut short keeps every task written so far (a later run into the same folder
goes on from them).
"""

from __future__ import annotations

import ast
import random
import shutil
import threading
import time
from collections import Counter
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from actors.tasks.parsing import parse
from actors.tasks.spec import Task, TaskError, load_task
from actors.tasks.synth import instruction as texts
from actors.tasks.synth.hidden import needed_tests
from actors.tasks.synth.mutate import Mutation, mutations, sample
from actors.tasks.synth.parity import grader_parity
from actors.tasks.synth.project import Project
from actors.tasks.synth.suite import MutantJob, SuiteRun, SuiteSandbox
from actors.tasks.synth.writer import Kept, LeakError, hidden_tests, task_id, task_id_prefix, write_task
from actors.tasks.testids import TestFileError, names_of_tests
from actors.tasks.validate import Admission, Verifier, validate_or_record
from actors.tasks.verify import Verification, task_quotas, verify
from sandbox_agent.backend import SandboxBackend
from sandbox_agent.limits import SandboxSpec

Progress = Callable[[str], None]
Span = tuple[int, int, frozenset[int]]  # a function's body lines (first, last), the lines its code starts at


@dataclass(frozen=True)
class SynthOptions:
    max_tasks: int | None = None  # stop once this many are kept (None: try every sampled mutant)
    max_mutants: int | None = None  # try at most this many
    seed: int = 0
    jobs: int = 1
    max_failing: int = 10  # K: a mutant failing more tests than this is too broad to be one bug
    baseline_runs: int = 3
    pass_to_pass: int = 10  # passing tests sampled into each task's hidden tests
    suite_timeout_s: float = 600.0
    task_timeout_s: float = 120.0
    # Runs of `tasks validate` (the real grader, repo/ as given and solved) on each task once written; one
    # found invalid is removed. 0: none (validate the folder afterwards).
    validate_runs: int = 1


class Reject:
    """Why a mutant did not become a task (the yield table's columns)."""

    NOT_REACHED = "no-test-reaches-it"
    NO_FAILURE = "no-test-fails"
    TOO_MANY = "too-many-fail"
    DUPLICATE = "same-failing-tests"
    UNSTABLE = "unstable-on-rerun"
    INCOMPLETE = "timed-out-or-crashed"
    LEAK = "leak-or-invalid"
    INSTRUCTION = "instruction-leaks"
    CALLS_UNRUN = "calls-an-unusable-test"
    INVALID = "invalid-"  # + the validation verdict (`invalid-flaky`): written, validated, removed


@dataclass
class SynthReport:
    project: str
    usable: int = 0
    flaky: tuple[str, ...] = ()
    unusable: int = 0  # failing, erroring or skipped at baseline, or not a frozen id
    mutants_available: int = 0
    tried: int = 0
    kept: list[str] = field(default_factory=list)
    rejected: Counter[str] = field(default_factory=Counter)
    by_operator: Counter[str] = field(default_factory=Counter)
    tests_run: int = 0
    beyond_max: int = 0  # mutants run past --max (the batches in flight finish): not decided
    refused_by_grader: int = 0  # test files whose unchanged run the grader saw as tampering
    baseline_s: float = 0.0
    seconds: float = 0.0
    already_in_out: int = 0  # tasks of this project release in --out before the run: their sets are taken
    skipped_made: int = 0  # mutants of the sample that are already tasks there: not run again

    def as_dict(self) -> dict[str, Any]:
        kept = len(self.kept)
        return {
            "project": self.project,
            "usable_tests": self.usable,
            "flaky_tests": list(self.flaky),
            "unusable_tests": self.unusable,
            "test_files_refused_by_grader": self.refused_by_grader,
            "mutants_available": self.mutants_available,
            "mutants_tried": self.tried,
            "kept": kept,
            "rejected": dict(sorted(self.rejected.items())),
            "kept_by_operator": dict(sorted(self.by_operator.items())),
            "tests_run": self.tests_run,
            "candidates_beyond_max": self.beyond_max,
            "already_in_out": self.already_in_out,
            "mutants_already_tasks": self.skipped_made,
            "baseline_s": round(self.baseline_s, 1),
            "seconds": round(self.seconds, 1),
            "seconds_per_kept_task": round(self.seconds / kept, 2) if kept else None,
            "tasks": list(self.kept),
        }


@dataclass(frozen=True)
class Baseline:
    usable: tuple[str, ...]
    flaky: tuple[str, ...]
    unusable: int
    calls: dict[str, frozenset[str]]  # usable test -> "file:firstline" of the workspace code it called
    durations_s: float
    # tests (ids without parameters) with an instance that is not usable: a hidden file holding one would
    # grade that instance too
    partly_unusable: frozenset[str] = frozenset()


def frozen_ids(project: Project) -> set[str]:
    """Every test id the grader would see in the project's flat test files (no parameters)."""
    ids: set[str] = set()
    for path, flat in project.tests.items():
        try:
            ids.update(f"tests/{flat}::{name}" for name in names_of_tests(project.files[path], Path(path)))
        except TestFileError:
            continue
    return ids


def judge_baseline(
    runs: Sequence[SuiteRun], frozen: set[str], graded: Collection[str] | None = None
) -> Baseline:
    """Usable: passed in every run, a frozen id (its base, for a parametrized instance) and, when `graded`
    is given, passed under the real grader too (`parity.grader_parity`)."""
    if not runs or not all(run.complete for run in runs):
        logs = "; ".join(run.log[-300:] for run in runs if not run.complete)
        raise RuntimeError(f"the project's suite did not complete in the sandbox: {logs}")
    seen = set().union(*(run.results for run in runs))
    always = set.intersection(*(run.passing() for run in runs))
    sometimes = set().union(*(run.passing() for run in runs)) - always
    usable = sorted(
        test for test in always if test.partition("[")[0] in frozen and (graded is None or test in graded)
    )
    calls = {test: runs[0].calls.get(test, frozenset()) for test in usable}
    partly = frozenset(test.partition("[")[0] for test in seen - set(usable))
    return Baseline(
        tuple(usable), tuple(sorted(sometimes)), len(seen) - len(usable), calls, runs[0].duration_s, partly
    )


def function_spans(source: str) -> list[Span]:
    """Each function's body lines (first, last) and the lines its code object may start at (the first
    decorator's, the def's), innermost last when nested."""
    spans: list[Span] = []
    for node in ast.walk(parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.end_lineno is not None:
            starts = {node.lineno, *(decorator.lineno for decorator in node.decorator_list)}
            spans.append((node.body[0].lineno, node.end_lineno, frozenset(starts)))
    return sorted(spans, key=lambda span: (span[0], -span[1]))


def reaching_tests(
    mutation: Mutation, spans: Sequence[tuple[int, int, frozenset[int]]], baseline: Baseline
) -> list[str]:
    """The usable tests that can execute the mutated code (all of them for code run at import)."""
    inside = [span for span in spans if span[0] <= mutation.line and mutation.end_line <= span[1]]
    if not inside:
        return list(baseline.usable)
    _, _, starts = max(inside, key=lambda span: span[0])  # the innermost function holding the mutant
    marks = {f"{mutation.path}:{line}" for line in starts}
    return [test for test in baseline.usable if baseline.calls.get(test, frozenset()) & marks]


BATCH = 6  # mutants per sandbox command: pytest is imported once per batch, each run is a fork


@dataclass(frozen=True)
class Candidate:
    """A mutant that failed 1 to K reaching tests, the same ones on a rerun: a task unless a mutant earlier
    in the sample order failed the same set, or writing it finds a leak."""

    mutation: Mutation
    mutant: str
    tests: tuple[str, ...]
    failing: tuple[str, ...]
    run: SuiteRun


def judge_mutant(
    mutation: Mutation, mutant: str, tests: Sequence[str], runs: Sequence[SuiteRun | None], max_failing: int
) -> Candidate | str:
    """What the runs of a mutant say (pure): a candidate, or why not."""
    if not runs or runs[0] is None:
        return Reject.INCOMPLETE
    failing = runs[0].failing(tests)
    if not failing:
        return Reject.NO_FAILURE
    if len(failing) > max_failing:
        return Reject.TOO_MANY
    if len(runs) < 2 or runs[1] is None or runs[1].failing(tests) != failing:
        return Reject.UNSTABLE
    return Candidate(mutation, mutant, tuple(tests), tuple(sorted(failing)), runs[0])


def forbidden_snippets(mutation: Mutation, original: str, mutant: str) -> list[str]:
    """Text that would name the fix: the replaced span both ways and the whole lines around it."""
    lines = [*original.splitlines()[mutation.line - 1 : mutation.end_line]]
    lines += mutant.splitlines()[mutation.line - 1 : mutation.end_line]
    return [snippet.strip() for snippet in [mutation.before, mutation.after, *lines] if snippet.strip()]


def tasks_made_before(out: Path, project: Project) -> dict[str, frozenset[str]]:
    """The tasks of this project release already under `out` (an earlier run, another seed): folder name ->
    its fail-to-pass set. A later run into the same folder treats those sets as taken and those mutants as
    done, so runs add up to one deduplicated set. A folder that does not load as a task is not one."""
    made: dict[str, frozenset[str]] = {}
    for folder in sorted(out.glob(f"{task_id_prefix(project)}*")) if out.is_dir() else ():
        try:
            meta = load_task(folder).spec.meta.synthesis
        except TaskError:
            continue
        if meta is not None and (meta.project, meta.version) == (project.name, project.version):
            made[folder.name] = frozenset(meta.fail_to_pass)
    return made


def sample_passing(
    passing: Sequence[str], near_files: Collection[str], budget: int, rng: random.Random
) -> list[str]:
    """Passing tests for a task's hidden tests, at most `budget` test instances: whole test functions (a
    hidden file keeps every instance of a function it keeps), those of the failing tests' files first,
    then the others, each group shuffled. A function with more instances than the budget has left is
    passed over: one parametrized 200 times would make every grade of the task 200 tests longer."""
    functions: dict[str, list[str]] = {}
    for test in passing:
        functions.setdefault(test.partition("[")[0], []).append(test)
    near = [base for base in functions if base.partition("::")[0] in near_files]
    far = [base for base in functions if base.partition("::")[0] not in near_files]
    rng.shuffle(near)
    rng.shuffle(far)
    chosen: list[str] = []
    for base in near + far:
        if len(chosen) >= budget:
            break
        if len(chosen) + len(functions[base]) <= budget:
            chosen.extend(functions[base])
    return sorted(chosen)


class Synthesizer:
    def __init__(
        self,
        project: Project,
        backend: SandboxBackend,
        spec: SandboxSpec,
        out: Path,
        options: SynthOptions,
        *,
        image: str | None = None,
        progress: Progress = lambda _line: None,
        grader: Verifier | None = None,
    ) -> None:
        """`grader` grades a task's workspace for the validation of written tasks (default: the real
        grader, in a sandbox of the task's image, or this run's)."""
        self.project, self.backend, self.spec, self.out = project, backend, spec, out
        self.options, self.image, self.progress = options, image, progress
        self._grader = grader or self._real_grader
        self._started = time.monotonic()
        self.report = SynthReport(project.source)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._ran = 0
        self._candidate_sets: set[frozenset[str]] = set()
        self._taken: set[frozenset[str]] = set()  # fail-to-pass sets of tasks made by earlier runs
        self._decided_sets: set[frozenset[str]] = set()  # those and the sets of mutants decided so far
        self._usable: set[str] = set()
        self._partly_unusable: frozenset[str] = frozenset()
        self._usable_by_function: dict[str, list[str]] = {}  # test id without parameters -> usable instances
        self._mutant_timeout_s = options.suite_timeout_s
        self._checks: ThreadPoolExecutor | None = None  # validates written tasks while the mutants run
        self._validations: list[Future[None]] = []

    def run(self) -> SynthReport:
        started = self._started = time.monotonic()
        self.out.mkdir(parents=True, exist_ok=True)
        with SuiteSandbox(self.backend, self.spec, self.project, self.options.suite_timeout_s) as suite:
            runs = [suite.run(trace=index == 0) for index in range(self.options.baseline_runs)]
        parity = grader_parity(
            self.project,
            self.backend,
            self.spec,
            timeout_s=self.options.task_timeout_s,
            jobs=self.options.jobs,
            progress=self.progress,
        )
        baseline = judge_baseline(runs, frozen_ids(self.project), parity.accepted)
        self.report.refused_by_grader = len(parity.refused_files)
        self._usable = set(baseline.usable)
        self._partly_unusable = baseline.partly_unusable
        for test in baseline.usable:  # once: every kept task's cut is checked against it
            self._usable_by_function.setdefault(test.partition("[")[0], []).append(test)
        # A mutant can loop forever (a dropped `i += 1`): its run is cut well before the sandbox's limit.
        self._mutant_timeout_s = min(self.options.suite_timeout_s, max(30.0, 3 * baseline.durations_s + 10))
        report = self.report
        report.usable, report.flaky, report.unusable = len(baseline.usable), baseline.flaky, baseline.unusable
        report.tests_run += sum(len(run.results) for run in runs)
        report.baseline_s = time.monotonic() - started
        self.progress(
            f"{self.project.source}: {len(baseline.usable)} usable tests, {len(baseline.flaky)} flaky, "
            f"{baseline.unusable} unusable ({report.baseline_s:.0f} s for {len(runs)} baseline runs)"
        )
        if not baseline.usable:
            self.progress(f"{self.project.source}: no usable test, so no mutant can be judged: nothing to do")
            report.seconds = time.monotonic() - started
            return report
        by_module: dict[str, list[Mutation]] = {}
        spans: dict[str, list[Span]] = {}
        for path in self.project.modules:
            try:
                source = self.project.files[path].decode()
                by_module[path], spans[path] = mutations(source, path), function_spans(source)
            except (UnicodeDecodeError, ValueError, SyntaxError) as exc:  # not this Python's: not mutated
                self.progress(f"{self.project.source}: {path} skipped ({exc})")
        report.mutants_available = sum(len(found) for found in by_module.values())
        made = tasks_made_before(self.out, self.project)
        self._taken = set(made.values())
        self._decided_sets = set(self._taken)
        report.already_in_out = len(made)
        order = sample(by_module, self.options.max_mutants, self.options.seed)
        if made:
            fresh = [m for m in order if task_id(self.project, m.key) not in made]
            report.skipped_made = len(order) - len(fresh)
            order = fresh
            self.progress(
                f"{self.project.source}: {len(made)} tasks already in {self.out} (their failing sets are "
                f"taken); {report.skipped_made} of the sampled mutants are among them and not run again"
            )
        queue = list(reversed(order))
        found: dict[int, Candidate | str] = {}

        def work() -> None:
            with SuiteSandbox(self.backend, self.spec, self.project, self.options.suite_timeout_s) as suite:
                while not self._stop.is_set():
                    with self._lock:
                        batch = [
                            (len(order) - len(queue), queue.pop()) for _ in range(min(BATCH, len(queue)))
                        ]
                    if not batch:
                        return
                    for index, outcome in self._try_batch(suite, batch, spans, baseline):
                        with self._lock:
                            found[index] = outcome
                            self._note(outcome)
                            self._decide_ready(found)

        with ThreadPoolExecutor(
            max_workers=max(1, self.options.jobs), thread_name_prefix="validate"
        ) as checks:
            self._checks = checks
            with ThreadPoolExecutor(max_workers=max(1, self.options.jobs)) as pool:
                for future in [pool.submit(work) for _ in range(max(1, self.options.jobs))]:
                    future.result()
            self._decide_ready(found)
        self._checks = None
        for check in self._validations:  # all done; one that raised says so here rather than never
            check.result()
        report.beyond_max = len(found) - report.tried
        report.seconds = time.monotonic() - started
        return report

    def _note(self, outcome: Candidate | str) -> None:
        """Count a mutant run, and say how far the run is now and then."""
        self._ran += 1
        if isinstance(outcome, Candidate) and frozenset(outcome.failing) not in self._taken:
            self._candidate_sets.add(frozenset(outcome.failing))
        if self._ran % 25 == 0:
            elapsed = time.monotonic() - self._started
            self.progress(
                f"{self.project.source}: {self._ran} mutants run, {len(self._candidate_sets)} distinct "
                f"candidates, {len(self.report.kept)} tasks written ({elapsed:.0f} s)"
            )

    def _full(self) -> bool:
        return self.options.max_tasks is not None and len(self.report.kept) >= self.options.max_tasks

    def _decide_ready(self, found: dict[int, Candidate | str]) -> None:
        """Decide the mutants run so far in sample order, up to the first one still running (so the
        threads' timing changes nothing): deduplicate by failing-test set and write the tasks as they are
        decided (a run cut short keeps what it wrote); stop the runs at --max. Called with the lock held."""
        report = self.report
        while report.tried in found and not self._full():
            run = found[report.tried]
            report.tried += 1
            outcome: Kept | str = run if isinstance(run, str) else Reject.DUPLICATE
            if isinstance(run, Candidate) and frozenset(run.failing) not in self._decided_sets:
                self._decided_sets.add(frozenset(run.failing))
                outcome = self._keep(run)
            if isinstance(outcome, str):
                report.rejected[outcome] += 1
            else:
                report.by_operator[outcome.operator] += 1
        if self._full():
            self._stop.set()

    def _try_batch(
        self,
        suite: SuiteSandbox,
        batch: list[tuple[int, Mutation]],
        spans: Mapping[str, Sequence[Span]],
        baseline: Baseline,
    ) -> Iterator[tuple[int, Candidate | str]]:
        jobs: dict[str, tuple[int, Mutation, str, list[str]]] = {}
        for index, mutation in batch:
            tests = reaching_tests(mutation, spans[mutation.path], baseline)
            if not tests:
                yield index, Reject.NOT_REACHED
                continue
            mutant = mutation.apply(self.project.files[mutation.path].decode())
            jobs[mutation.key] = (index, mutation, mutant, tests)
        if not jobs:
            return
        timeout_s = self._mutant_timeout_s
        answers = suite.run_batch(
            [
                MutantJob(key, mutation.path, mutant, tuple(tests), self.options.max_failing, timeout_s)
                for key, (_, mutation, mutant, tests) in jobs.items()
            ]
        )
        for key, (index, mutation, mutant, tests) in jobs.items():
            runs = answers.get(key, ())
            with self._lock:
                self.report.tests_run += sum(len(run.results) for run in runs if run is not None)
            yield index, judge_mutant(mutation, mutant, tests, runs, self.options.max_failing)

    def _keep(self, candidate: Candidate) -> Kept | str:
        mutation, mutant, run = candidate.mutation, candidate.mutant, candidate.run
        failing = list(candidate.failing)
        original = self.project.files[mutation.path].decode()
        rng = random.Random(f"{self.options.seed}:{mutation.key}")
        failing_files = {test.partition("::")[0] for test in failing}
        # Passing with the mutant: the reaching tests that did not fail, and every usable test that never
        # reached it (it ran unchanged code).
        passing = sorted(set(self._usable) - set(failing))
        pass_to_pass = sample_passing(passing, failing_files, self.options.pass_to_pass, rng)
        called = self._called_tests([*failing, *pass_to_pass])
        if not called <= set(passing) | set(failing):  # a kept test calls one that is not usable
            return Reject.CALLS_UNRUN
        pass_to_pass = sorted(set(pass_to_pass) | (called - set(failing)))
        reported = self._reported_by_cut([*failing, *pass_to_pass])
        if reported is None:  # the cut files would report a test that is not usable
            return Reject.CALLS_UNRUN
        pass_to_pass = sorted(set(pass_to_pass) | (reported - set(failing)))
        forbidden = forbidden_snippets(mutation, original, mutant)
        failing_tests = [
            texts.FailingTest(
                test, self._docstring(test), run.results[test].error if test in run.results else ""
            )
            for test in failing
        ]
        instruction = texts.write_instruction(self.project.name, failing_tests, forbidden=forbidden)
        if texts.leaks(instruction, forbidden):
            return Reject.INSTRUCTION
        errors = tuple(
            (test.test_id, texts.error_excerpt(test.error, forbidden)) for test in failing_tests if test.error
        )
        kept = Kept(
            key=mutation.key,
            operator=mutation.operator.value,
            path=mutation.path,
            mutant=mutant.encode(),
            mutation=mutation.describe(),
            fail_to_pass=tuple(failing),
            pass_to_pass=tuple(pass_to_pass),
            errors=errors,
            instruction=instruction,
            timeout_s=self.options.task_timeout_s,
        )
        try:
            folder = write_task(self.project, kept, self.out, image=self.image)
        except (LeakError, ValueError) as exc:
            self.progress(f"rejected {mutation.key}: {exc}")
            return Reject.LEAK
        self.report.kept.append(folder.name)
        if self._checks is not None and self.options.validate_runs:
            self._validations.append(self._checks.submit(self._validate, folder, kept.operator))
        return kept

    def _validate(self, folder: Path, operator: str) -> None:
        """Validate a written task with the real grader; remove it if it is not valid (the yield table
        counts it as `invalid-<verdict>`, not kept)."""
        result = validate_or_record(folder, self._grader, self.options.validate_runs, False)
        if result.verdict is Admission.VALID:
            return
        shutil.rmtree(folder, ignore_errors=True)
        with self._lock:
            self.report.kept.remove(folder.name)
            self.report.by_operator[operator] -= 1
            if not self.report.by_operator[operator]:
                del self.report.by_operator[operator]
            self.report.rejected[Reject.INVALID + result.verdict.value] += 1
        self.progress(f"removed {folder.name}: {result.verdict.value} ({'; '.join(result.reasons)[:300]})")

    def _reported_by_cut(self, test_ids: Sequence[str]) -> set[str] | None:
        """Every test the hidden files cut for `test_ids` report, or None if one is not usable (or has an
        instance that is not: the grader runs every instance of a kept function). It is more than asked
        when a kept test is inherited (`Sub::test_a` keeps `Base`, which reports `test_a` too). One that
        does not fail with the mutant passes with it: it is a reaching test that passed, or it never ran
        the mutated code."""
        by_base = self._usable_by_function
        reported: set[str] = set()
        test_files = set(self.project.tests.values())
        for flat, source in hidden_tests(self.project, test_ids).items():
            if flat not in test_files:
                continue  # a support module beside the tests: it holds none
            for name in names_of_tests(source, Path(flat)):
                base = f"tests/{flat}::{name}"
                instances = by_base.get(base)
                if not instances or base in self._partly_unusable:
                    return None
                reported.update(instances)
        return reported

    def _real_grader(self, task: Task, workspace: Path) -> Verification:
        spec = SandboxSpec(task.spec.image or self.spec.image, task_quotas(task))
        return verify(task, workspace, self.backend, spec)

    def _called_tests(self, test_ids: Sequence[str]) -> set[str]:
        """The module-level tests that `test_ids` call by name (they must be kept in the hidden file)."""
        by_file: dict[str, set[str]] = {}
        for test_id in test_ids:
            file_part, _, name = test_id.partition("::")
            by_file.setdefault(file_part, set()).add(name.partition("[")[0])
        called: set[str] = set()
        for file_part, names in by_file.items():
            source = self.project.files[self.project.test_path(PurePosixPath(file_part).name)].decode()
            called |= {f"{file_part}::{name}" for name in needed_tests(source, names) - names}
        return called

    def _docstring(self, test_id: str) -> str | None:
        file_part, _, name = test_id.partition("::")
        source = self.project.files[self.project.test_path(PurePosixPath(file_part).name)]
        node: Any = parse(source)
        for part in name.partition("[")[0].split("::"):
            node = next(
                (item for item in getattr(node, "body", []) if getattr(item, "name", None) == part), None
            )
            if node is None:
                return None
        return ast.get_docstring(node)
