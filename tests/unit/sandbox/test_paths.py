from __future__ import annotations

import pytest

from sandbox_agent.paths import PathOutsideWorkspace, ancestors, workspace_relative


@pytest.mark.parametrize(
    ("path", "relative"),
    [("a/b", "a/b"), ("./a//b/", "a/b"), ("/workspace/a/b", "a/b"), ("a/./b", "a/b"), ("-rf", "-rf")],
)
def test_paths_in_the_workspace_take_one_canonical_form(path: str, relative: str) -> None:
    assert workspace_relative(path) == relative


@pytest.mark.parametrize(
    "path", ["../x", "a/../../x", "a/..", "/etc/passwd", "/workspacex/a", "", ".", "/workspace", "a\0b"]
)
def test_paths_leaving_or_naming_the_workspace_are_refused(path: str) -> None:
    with pytest.raises(PathOutsideWorkspace):
        workspace_relative(path)


def test_ancestors_are_the_folders_a_path_lies_in() -> None:
    assert ancestors("a/b/c") == ["a", "a/b"]
    assert ancestors("top") == []
