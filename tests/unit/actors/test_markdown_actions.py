"""Markdown actions: what a small model writes, read as the tool call it means (the first one wins)."""

from __future__ import annotations

import pytest

from actors.rollout.markdown_actions import MalformedCall, markdown_action, only_python_file
from schemas.actions import RunCommand, Submit, WriteFile

ADD = b"def add(a, b):\n    return a + b\n"


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("```python\n# calc.py\ndef add(a, b):\n    return a + b\n```", WriteFile("calc.py", ADD)),
        (
            "Here is the fix:\n```python calc.py\ndef add(a, b):\n    return a + b\n```\nDone.",
            WriteFile("calc.py", ADD),
        ),
        ("```calc.py\ndef add(a, b):\n    return a + b\n```", WriteFile("calc.py", ADD)),
        (
            "```python\n# file: src/calc.py\ndef add(a, b):\n    return a + b\n```",
            WriteFile("src/calc.py", ADD),
        ),
        ("```python\ncalc.py\ndef add(a, b):\n    return a + b\n```", WriteFile("calc.py", ADD)),
        ("```python\n# /workspace/calc.py\ndef add(a, b):\n    return a + b\n```", WriteFile("calc.py", ADD)),
        ("```python\n# calc.py\ndef add(a, b):\n    return a + b", WriteFile("calc.py", ADD)),  # not closed
        ("run: python3 -m pytest -q", RunCommand("python3 -m pytest -q")),
        ("Let me test.\n`run: ls -la`", RunCommand("ls -la")),
        ("```bash\n$ ls\n```", RunCommand("ls")),
        ("All done.\nsubmit", Submit()),
        ("submit()", Submit()),
        ('{"tool": "run", "command": "ls"}', RunCommand("ls")),
        ('```json\n{"tool": "submit"}\n```', Submit()),
    ],
)
def test_each_form_is_read_as_its_action(reply: str, expected: object) -> None:
    assert markdown_action(reply) == expected


def test_the_first_action_in_the_reply_wins() -> None:
    reply = "run: cat calc.py\n```python\n# calc.py\nx = 1\n```\nsubmit"
    assert markdown_action(reply) == RunCommand("cat calc.py")
    later = "```python\n# calc.py\nx = 1\n```\nrun: pytest\nsubmit"
    assert markdown_action(later) == WriteFile("calc.py", b"x = 1\n")


def test_lines_inside_a_code_block_are_code_not_actions() -> None:
    reply = "```python\n# calc.py\nsubmit\nrun: rm -rf /\n```"
    assert markdown_action(reply) == WriteFile("calc.py", b"submit\nrun: rm -rf /\n")


@pytest.mark.parametrize(
    "reply",
    [
        "",
        "I think the bug is in add().",
        "```python\ndef add(a, b):\n    return a + b\n```",  # no file named
        "```python\n# fix the bug\nx = 1\n```",
        "```python\n# ../etc/passwd.txt\nx\n```",  # no way out of the workspace
        "submit the fix now",  # a sentence, not the action line
    ],
)
def test_text_without_an_action_is_none(reply: str) -> None:
    assert markdown_action(reply) is None


def test_an_invalid_json_tool_call_says_what_is_wrong() -> None:
    with pytest.raises(MalformedCall, match="unknown tool"):
        markdown_action('{"tool": "delete", "path": "x"}')


@pytest.mark.parametrize(
    ("instruction", "expected"),
    [
        ("Change `answer()` in `answer.py` so that it returns the number 3.", "answer.py"),
        ("Fix add in pkg/calc.py; calc.py is imported by totals", None),  # two files
        ("`add` in calc.py is wrong, so calc.py's total() is too.", "calc.py"),  # one file, twice
        ("Make the tests pass.", None),
    ],
)
def test_the_one_python_file_a_task_names(instruction: str, expected: str | None) -> None:
    assert only_python_file(instruction) == expected


def test_an_unnamed_python_block_writes_the_one_file_the_task_names() -> None:
    reply = "Sure:\n```python\ndef answer():\n    return 3\n```"
    assert markdown_action(reply, "answer.py") == WriteFile("answer.py", b"def answer():\n    return 3\n")
    assert markdown_action(reply) is None  # the task names no single file: still no action
    shell = "```bash\npytest -q\n```"
    assert markdown_action(shell, "answer.py") == RunCommand(
        "pytest -q"
    )  # other languages keep their meaning
    named = "```python\n# other.py\nx = 1\n```"
    assert markdown_action(named, "answer.py") == WriteFile("other.py", b"x = 1\n")  # a named file wins
