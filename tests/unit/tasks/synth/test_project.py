"""A project as synthesis sees it: what the agent's tree keeps and drops, what may be mutated."""

from __future__ import annotations

from pathlib import Path

import pytest

from actors.tasks.synth.project import ProjectError, flat_names, load_project


def write(root: Path, files: dict[str, str]) -> Path:
    for path, text in files.items():
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text(text)
    return root


def test_the_tree_drops_history_bytecode_and_build_output(tmp_path: Path) -> None:
    root = write(
        tmp_path,
        {
            "lib/__init__.py": "", "lib/core.py": "X = 1\n", "tests/test_core.py": "def test_x(): pass\n",
            ".git/HEAD": "ref", "lib/__pycache__/core.cpython-311.pyc": "", "lib/core.py.orig": "X = 2\n",
            "lib.egg-info/PKG-INFO": "", "build/lib/lib/core.py": "X = 1\n", "setup.py": "",
            "docs/conf.py": "",
        },
    )  # fmt: skip
    project = load_project(root, "lib", "1.0")
    assert sorted(project.files) == [
        "docs/conf.py",
        "lib/__init__.py",
        "lib/core.py",
        "setup.py",
        "tests/test_core.py",
    ]
    assert project.modules == ("lib/__init__.py", "lib/core.py")  # not tests, docs or setup.py
    assert project.tests == {"tests/test_core.py": "test_core.py"}
    assert project.top_level == ("lib",)


def test_a_src_layout_is_lifted_to_the_top(tmp_path: Path) -> None:
    root = write(tmp_path, {"src/pkg/__init__.py": "", "src/pkg/a.py": "", "tests/test_a.py": ""})
    project = load_project(root, "pkg", "2")
    assert project.modules == ("pkg/__init__.py", "pkg/a.py")


def test_same_named_test_files_get_their_folders_in_the_flat_name() -> None:
    names = flat_names(["pkg/tests/test_core.py", "pkg/sandbox/tests/test_core.py", "tests/test_x.py"])
    assert names == {
        "pkg/tests/test_core.py": "test_pkg_core.py",
        "pkg/sandbox/tests/test_core.py": "test_pkg_sandbox_core.py",
        "tests/test_x.py": "test_x.py",
    }


def test_a_project_without_tests_or_code_is_refused_with_the_reason(tmp_path: Path) -> None:
    with pytest.raises(ProjectError, match="no test files"):
        load_project(write(tmp_path / "a", {"lib/core.py": ""}), "a", "1")
    with pytest.raises(ProjectError, match="no library modules"):
        load_project(write(tmp_path / "b", {"tests/test_x.py": ""}), "b", "1")


def test_helper_modules_beside_the_tests_go_with_the_hidden_tests(tmp_path: Path) -> None:
    root = write(
        tmp_path,
        {
            "lib/core.py": "", "test/common.py": "", "test/test_core.py": "", "test/conftest.py": "",
            "test/__init__.py": "", "benchmark/benchmark.py": "",
        },
    )  # fmt: skip
    project = load_project(root, "lib", "1")
    assert project.support == {"test/common.py": "common.py"}  # never conftest.py or __init__.py
    assert project.modules == ("lib/core.py",)


def test_a_library_module_beside_the_tests_is_never_a_hidden_helper(tmp_path: Path) -> None:
    # six's layout: its tests sit beside six.py; a hidden copy of the original would be graded instead.
    root = write(
        tmp_path, {"six.py": "X = 1\n", "test_six.py": "import six\n", "setup.py": "", "helper.py": ""}
    )
    project = load_project(root, "six", "1")
    assert project.modules == ("helper.py", "six.py")
    assert project.support == {}
