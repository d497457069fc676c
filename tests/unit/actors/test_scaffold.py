from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st

from actors.rollout.policy import render_action
from actors.rollout.scaffold import ReplyError, messages, observation, parse_reply
from schemas.actions import ApplyPatch, RunCommand, Submit, WriteFile
from schemas.blobs import BlobRef
from schemas.common import Output
from schemas.events import ActionProposed, StepExecuted, StepRecord
from schemas.requests import PolicyRequest, SamplingParams

from .requests import request_meta


def _step(reply: str, action: RunCommand, stdout: str, exit_code: int = 0) -> StepRecord:
    meta = request_meta(step=0)
    proposed = ActionProposed(meta, action, reply, 10, (1, 2), (-0.5, -0.1), 1000)
    executed = StepExecuted(meta, exit_code, Output(stdout), Output(""), False, 2000)
    return StepRecord(proposed, executed)


def test_the_chat_replays_each_reply_and_its_observation() -> None:
    reply = 'Let me look.\n{"tool": "run", "command": "ls"}'
    history = (_step(reply, RunCommand("ls"), "calc.py\n"),)
    request = PolicyRequest(request_meta(step=1), "Fix add in calc.py.", history, SamplingParams())
    chat = messages(request)
    assert [m["role"] for m in chat] == ["system", "user", "assistant", "user"]
    assert "Fix add in calc.py." in chat[1]["content"]
    assert chat[2]["content"] == reply  # the model's own tokens, not a re-rendering
    assert chat[3]["content"] == "exit code 0\nstdout:\ncalc.py"


def test_observations_are_bounded_and_say_what_happened() -> None:
    result = StepExecuted(request_meta(), 137, Output("x" * 5000, truncated=True), Output(""), True, 1, True)
    text = observation(result)
    assert text.startswith("exit code 137\n")
    assert "time limit" in text and "out of memory" in text
    assert "stdout (end only):" in text and len(text) < 2200


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ('{"tool": "run", "command": "python3 -m pytest -q"}', RunCommand("python3 -m pytest -q")),
        ('I will submit.\n```json\n{"tool": "submit"}\n```', Submit()),
        (
            'Fix: {"tool": "write_file", "path": "calc.py", '
            '"content": "def add(a, b):\\n    return a + b\\n"}',
            WriteFile("calc.py", b"def add(a, b):\n    return a + b\n"),
        ),
        (
            '{"note": "thinking"} then {"tool": "apply_patch", "diff": "--- a\\n+++ b\\n"}',
            ApplyPatch("--- a\n+++ b\n"),
        ),
        ('{"tool": "run", "command": "echo \'{not json}\'"}', RunCommand("echo '{not json}'")),
    ],
)
def test_the_first_tool_call_in_a_reply_is_taken(reply: str, expected: object) -> None:
    assert parse_reply(reply) == expected


@pytest.mark.parametrize(
    ("reply", "says"),
    [
        ("def add(a, b):\n    return a + b", "no action"),
        ('{"tool": "run", "command": }', "not valid JSON"),
        ('{"tool": "delete", "path": "x"}', "unknown tool"),
        ('{"tool": "run", "cmd": "ls"}', "'command' must be a string"),
        ("```python\ndef add(a, b):\n    return a + b\n```", "name its file"),
        ("", "no action"),
    ],
)
def test_a_reply_that_is_not_a_tool_call_says_why_and_how(reply: str, says: str) -> None:
    error = parse_reply(reply)
    assert isinstance(error, ReplyError)
    assert says in error.message and "first line names the file" in error.message


actions = st.one_of(
    st.builds(RunCommand, st.text(max_size=40)),
    st.builds(WriteFile, st.text(min_size=1, max_size=20), st.text(max_size=60).map(str.encode)),
    st.builds(ApplyPatch, st.text(max_size=60)),
    st.builds(Submit, st.text(max_size=20)),
)


PROSE = st.text(max_size=30).filter(
    lambda t: not any(m in t.lower() for m in ("{", "}", "`", "run:", "submit"))
)


@given(actions, PROSE)
def test_any_rendered_action_parses_back_after_free_text(action: object, prose: str) -> None:
    assert parse_reply(f"{prose}\n{render_action(action)}\n{prose}") == action  # type: ignore[arg-type]


def test_a_reply_held_by_reference_is_replaced_by_a_note() -> None:
    step = _step("x", RunCommand("ls"), "")
    long_reply = dataclasses.replace(
        step, action=dataclasses.replace(step.action, response=BlobRef.of(b"x" * 99))
    )
    chat = messages(PolicyRequest(request_meta(step=1), "t", (long_reply,), SamplingParams()))
    assert chat[2] == {"role": "assistant", "content": "(a long reply, not shown)"}
