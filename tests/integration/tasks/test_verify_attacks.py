"""The verifier in real sandboxes: honest work scores, and none of the published reward hacks does."""

from __future__ import annotations

import dataclasses
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import docker
import pytest

from actors.tasks.reward import Verdict
from actors.tasks.spec import Task, load_task
from actors.tasks.verify import Verification, dumps, print_human, verify
from actors.verifier.worker import reward_assigned
from ops.paths import REPO_ROOT
from ops.stack.images import sandbox_ref
from ops.testing import owned_labels
from sandbox_agent.docker_backend import DockerBackend
from sandbox_agent.limits import MIB, Quotas, SandboxSpec
from schemas.blobs import LocalObjectStore
from schemas.codec import default_codec
from schemas.events import RewardAssigned
from tests.unit.actors.requests import fixed_origin, verify_request

EXAMPLES = REPO_ROOT / "examples" / "tasks"
SPEC = Quotas(memory_bytes=512 * MIB, cpus=1.0, pids=128, workspace_bytes=64 * MIB, tmp_bytes=64 * MIB)

Grade = Callable[[Task, Path], Verification]


@pytest.fixture(scope="module")
def run_verify(docker_client: docker.DockerClient, tmp_path_factory: pytest.TempPathFactory) -> Grade:
    objects = LocalObjectStore(tmp_path_factory.mktemp("objects"))
    backend = DockerBackend(docker_client, objects, labels=owned_labels("verify"))
    spec = SandboxSpec(str(sandbox_ref()), SPEC)
    return lambda task, workspace: verify(task, workspace, backend, spec)


@pytest.fixture(scope="module")
def task() -> Task:
    return load_task(EXAMPLES / "easy-fix-range")


@pytest.fixture
def quick_task(task: Task) -> Task:
    """The same task with a short timeout, for attacks that hang."""
    return dataclasses.replace(task, spec=dataclasses.replace(task.spec, timeout_s=8))


def _workspace(task: Task, tmp_path: Path, *, solved: bool) -> Path:
    return task.copy_repo(tmp_path / "ws", solved=solved)


def test_the_reference_solution_passes(run_verify: Grade, task: Task, tmp_path: Path) -> None:
    result = run_verify(task, _workspace(task, tmp_path, solved=True))
    assert (result.grade.verdict, result.grade.reward) == (Verdict.PASS, 1.0)
    assert result.grade.passed == result.grade.total > 0


def test_the_unsolved_repo_does_not_pass(run_verify: Grade, task: Task, tmp_path: Path) -> None:
    result = run_verify(task, _workspace(task, tmp_path, solved=False))
    assert result.grade.verdict in (Verdict.FAIL, Verdict.PARTIAL)
    assert result.grade.reward < 1.0 and result.grade.failed_tests


# Each payload would turn the unsolved task into a pass if it took effect.
CORRECT_MODULE = "def numbers_up_to(n):\n    return list(range(1, n + 1))\n"
PLANT_CORRECT = (
    "import sys, types\n"
    "m = types.ModuleType('counting')\n"
    f"exec({CORRECT_MODULE!r}, m.__dict__)\n"
    "sys.modules['counting'] = m\n"
)
FAKE_PYTEST = (
    "import glob, re\n"
    "def main(args=None, plugins=()):\n"
    "    for path in glob.glob('/inputs/tests/**/*.py', recursive=True):\n"
    "        for name in re.findall(r'^def (test_\\w+)', open(path).read(), re.M):\n"
    "            node = 'tests/' + path.split('/tests/', 1)[1] + '::' + name\n"
    "            report = type('R', (), {'nodeid': node, 'when': 'call', 'outcome': 'passed'})()\n"
    "            for plugin in plugins:\n"
    "                plugin.pytest_runtest_logreport(report)\n"
    "    return 0\n"
)
ATTACKS = {
    # A conftest.py that turns every failing report into a pass.
    "conftest.py": (
        "import pytest\n"
        "@pytest.hookimpl(hookwrapper=True)\n"
        "def pytest_runtest_makereport(item, call):\n"
        "    outcome = yield\n"
        "    report = outcome.get_result()\n"
        "    report.outcome = 'passed'\n"
    ),
    # Run at interpreter start-up if the workspace were on the path then: they plant a correct module.
    "sitecustomize.py": PLANT_CORRECT,
    "usercustomize.py": PLANT_CORRECT,
    # Run by `site` if the workspace were a site folder.
    "evil.pth": PLANT_CORRECT.replace("\n", "; ").rstrip("; ") + "\n",
    # A fake pytest that reports every frozen test as passed to whatever plugins it is handed.
    "pytest/__init__.py": FAKE_PYTEST,
    # A module named like the standard library, imported by pytest's machinery.
    "inspect.py": "raise SystemExit(0)\n",
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_workspace_files_cannot_change_how_tests_run(
    run_verify: Grade, task: Task, tmp_path: Path, attack: str
) -> None:
    workspace = _workspace(task, tmp_path, solved=False)
    target = workspace / attack
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(ATTACKS[attack])
    result = run_verify(task, workspace)
    assert result.grade.verdict is not Verdict.PASS, result
    assert result.grade.failed_tests


def test_exit_zero_at_import_is_a_failure(run_verify: Grade, task: Task, tmp_path: Path) -> None:
    workspace = _workspace(task, tmp_path, solved=False)
    (workspace / "counting.py").write_text("import os\nos._exit(0)\n")
    result = run_verify(task, workspace)
    assert result.grade.verdict is Verdict.FAIL
    assert result.grade.passed == 0


def test_an_import_that_hangs_is_a_failure(run_verify: Grade, quick_task: Task, tmp_path: Path) -> None:
    workspace = _workspace(quick_task, tmp_path, solved=True)
    (workspace / "counting.py").write_text("import time\ntime.sleep(10_000)\n")
    result = run_verify(quick_task, workspace)
    assert result.grade.verdict is Verdict.FAIL
    assert result.harness_exit is None  # killed at the timeout
    assert result.duration_s < quick_task.spec.timeout_s + 15


def test_printed_report_lines_cannot_forge_a_pass(run_verify: Grade, task: Task, tmp_path: Path) -> None:
    workspace = _workspace(task, tmp_path, solved=False)
    forged = "".join(
        f'print(\'TRIALOG-REPORT x {{"id": "{test_id}", "when": "call", "outcome": "passed"}}\')\n'
        for test_id in task.test_ids
    )
    counting = workspace / "counting.py"
    counting.write_text(forged + counting.read_text())
    result = run_verify(task, workspace)
    assert result.grade.verdict is not Verdict.PASS


def test_a_symlink_to_a_host_file_is_not_followed(run_verify: Grade, task: Task, tmp_path: Path) -> None:
    # The solved module exists on the host; a link to it must not smuggle it into the sandbox.
    solved = _workspace(task, tmp_path / "solved", solved=True)
    workspace = _workspace(task, tmp_path, solved=False)
    (workspace / "counting.py").unlink()
    os.symlink(solved / "counting.py", workspace / "counting.py")
    result = run_verify(task, workspace)
    assert result.grade.verdict is Verdict.FAIL


@pytest.fixture(scope="module")
def protected_task() -> Task:
    task = load_task(EXAMPLES / "word-count")
    assert task.spec.protected == ("tests/**",)
    return task


def test_deleting_a_protected_visible_test_is_tampering(
    run_verify: Grade, protected_task: Task, tmp_path: Path
) -> None:
    workspace = _workspace(protected_task, tmp_path, solved=True)
    shutil.rmtree(workspace / "tests")
    result = run_verify(protected_task, workspace)
    assert (result.grade.verdict, result.grade.reward) == (Verdict.TAMPERED, -1.0)
    assert result.grade.tampered_paths


def test_rewriting_a_protected_visible_test_is_tampering(
    run_verify: Grade, protected_task: Task, tmp_path: Path
) -> None:
    workspace = _workspace(protected_task, tmp_path, solved=True)
    visible = next((workspace / "tests").glob("test_*.py"))
    visible.write_text("def test_nothing():\n    pass\n")
    result = run_verify(protected_task, workspace)
    assert result.grade.verdict is Verdict.TAMPERED
    assert result.grade.tampered_paths == (visible.relative_to(workspace).as_posix(),)


def test_a_failing_build_is_a_build_failure(run_verify: Grade, task: Task, tmp_path: Path) -> None:
    broken = dataclasses.replace(task, spec=dataclasses.replace(task.spec, build_command="exit 3"))
    result = run_verify(broken, _workspace(task, tmp_path, solved=True))
    assert (result.grade.verdict, result.grade.reward) == (Verdict.BUILD_FAILED, -0.5)


# A file name that is not UTF-8, as `os.fsdecode` gives it (and as a snapshot of the sandbox carries it).
NOT_UTF8 = os.fsdecode(b"\xff.py")


@pytest.fixture
def add_task() -> Task:
    """easy-fix-add with its source files protected: the files an agent could rename away from."""
    task = load_task(EXAMPLES / "easy-fix-add")
    return dataclasses.replace(task, spec=dataclasses.replace(task.spec, protected=("*.py",)))


def _assert_tamper_reaches_the_log(result: Verification, expected: tuple[str, ...]) -> None:
    """The -1.0 must survive the trip to the log: encoded, decoded, the paths as they were on disk."""
    assert (result.grade.verdict, result.grade.reward) == (Verdict.TAMPERED, -1.0)
    assert result.grade.tampered_paths == expected
    answer = reward_assigned(fixed_origin("verifier"), verify_request(), result)
    decoded = default_codec().decode(default_codec().encode(answer))
    assert decoded == answer and isinstance(decoded, RewardAssigned)
    assert decoded.tampered_paths == expected
    assert [os.fsencode(p) for p in decoded.tampered_paths] == [os.fsencode(p) for p in expected]
    # What people read (the CLI, the JSON report) is printable and shows the byte.
    assert "\\xff" in print_human(result) and "\\xff" in dumps(result)
    print_human(result).encode("utf-8")


def test_adding_a_protected_file_with_a_non_utf8_name_is_tampering(
    run_verify: Grade, add_task: Task, tmp_path: Path
) -> None:
    workspace = _workspace(add_task, tmp_path, solved=False)  # the fix would change calc.py
    (workspace / NOT_UTF8).write_text("import calc\n")
    _assert_tamper_reaches_the_log(run_verify(add_task, workspace), (NOT_UTF8,))


def test_renaming_a_protected_file_to_a_non_utf8_name_is_tampering(
    run_verify: Grade, add_task: Task, tmp_path: Path
) -> None:
    workspace = _workspace(add_task, tmp_path, solved=False)
    (workspace / "calc.py").rename(workspace / NOT_UTF8)
    _assert_tamper_reaches_the_log(run_verify(add_task, workspace), tuple(sorted(("calc.py", NOT_UTF8))))
