"""Markdown actions: what a small model writes, read as the tool call it means (the first one wins)."""

from __future__ import annotations

import pytest

from actors.rollout.markdown_actions import MalformedCall, markdown_action
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
