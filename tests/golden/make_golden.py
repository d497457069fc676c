"""Golden episode logs: committed bytes that replay to a committed final state, forever.

The logs are history: once committed they are never regenerated, so that today's code keeps proving it
reads what earlier code wrote. Regenerate deliberately, and review the diff:

    python -m tests.golden.make_golden --expected   # replay the committed logs, rewrite the *.state.json
    python -m tests.golden.make_golden --logs NAME  # (re)write one log from its script, then its state

Each log is length-prefixed single-object records (`schemas.logfile`); `<name>.state.json` holds the record
count, the chain head and the final state (the EpisodeSnapshot record as JSON).
"""

from __future__ import annotations

import argparse
import base64
import json
from collections.abc import Callable
from io import BytesIO
from pathlib import Path
from typing import Any

from fastavro import schemaless_writer

from schemas.actions import ApplyPatch, InvalidReply, RunCommand, Submit, WriteFile
from schemas.blobs import MemoryObjectStore, inline_or_ref, text_or_ref
from schemas.codec import MAGIC, Codec, default_codec
from schemas.common import EpisodeConfig, FailureClass, Verdict
from schemas.events import RewardAssigned, StepExecuted
from schemas.logfile import encode_log, read_log
from schemas.replay import replay
from schemas.testing import EpisodeScript
from schemas.versions import GradeVersions

GOLDEN_DIR = Path(__file__).resolve().parent

PATCH = """--- a/src/calc.py
+++ b/src/calc.py
@@ -1,2 +1,2 @@
 def add(a, b):
-    return a - b
+    return a + b
"""


def completed(codec: Codec) -> list[bytes]:
    """Every tool, a blob by reference, truncated output, a retried policy request, a passing grade."""
    store = MemoryObjectStore()
    script = EpisodeScript(codec, episode_id="ep-golden-completed")
    script.start()
    content = b"def add(a, b):\n    return a - b\n" * 8  # over the inline cap below: goes by reference
    script.act(WriteFile("src/calc.py", inline_or_ref(content, store, cap=64)))
    script.execute()
    script.act(RunCommand("pytest -q"), attempt=2)
    failures = b"".join(b"FAILED tests/test_calc.py::test_add_%d - assert -1 == 3\n" % i for i in range(12))
    script.execute(exit_code=1, stdout=failures, stderr=b"1 warning\n")
    script.act(ApplyPatch(text_or_ref(PATCH, store, cap=4096)))
    script.execute()
    script.act(RunCommand("pytest -q"))
    script.execute(stdout=b"12 passed in 0.05s\n")
    script.act(Submit("fixed add()"))
    script.reward(1.0, Verdict.PASS, 12, 12)
    script.complete()
    return script.records


def failed(codec: Codec) -> list[bytes]:
    """A step killed at its time limit, then no sandbox answer: the episode fails with sandbox_timeout."""
    script = EpisodeScript(codec, episode_id="ep-golden-failed")
    script.start()
    script.act(RunCommand("python train.py"))
    script.execute(exit_code=137, timed_out=True, stdout=b"epoch 1\n", attempt=2)
    script.act(RunCommand("python train.py --epochs 1"), attempt=3)
    script.fail(FailureClass.SANDBOX_TIMEOUT, "no answer from sandbox after 3 attempts", retryable=True)
    return script.records


def redelivered(codec: Codec) -> list[bytes]:
    """At-least-once appends: the owner re-appended records it had already written (byte-identical)."""
    script = EpisodeScript(codec, episode_id="ep-golden-redelivered")
    script.start()
    script.act(RunCommand("ls"))
    script.execute(stdout=b"README\nsrc\n")
    script.act(Submit())
    script.reward(0.3, Verdict.PARTIAL, 1, 2, ("tests/test_b.py::test_b",))
    script.complete()
    r = script.records
    return [r[0], r[1], r[1], r[2], r[0], r[3], r[2], r[4], r[5], r[5]]


def _write_v1(codec: Codec, event: StepExecuted) -> bytes:
    """StepExecuted as a v1 sandbox agent wrote it (no oom_killed, no trace context)."""
    v1 = codec.catalog.version(StepExecuted.SCHEMA, 1)
    record = event.to_record()
    del record["oom_killed"]
    del record["meta"]["traceparent"]
    out = BytesIO()
    out.write(MAGIC + v1.fingerprint)
    schemaless_writer(out, v1.parsed, record)
    return out.getvalue()


def v1_steps(codec: Codec) -> list[bytes]:
    """Steps written by v1 sandbox agents, one of them OOM-killed (exit 137 without a timeout)."""
    script = EpisodeScript(codec, episode_id="ep-golden-v1")
    script.start()
    for command, exit_code in (("make", 0), ("./bench --size huge", 137)):
        script.act(RunCommand(command))
        event = script.execute(exit_code=exit_code, stdout=b"Killed\n" if exit_code else b"ok\n")
        script.log.pop()  # logged again as the v1 bytes, so that the chain hashes what was really written
        script.append(event, _write_v1(codec, event))
    script.act(Submit())
    script.fail(FailureClass.VERIFIER_ERROR, "verifier crashed")
    return script.records


def invalid_reply(codec: Codec) -> list[bytes]:
    """A reply with no tool call: the owner's own StepExecuted (exit code 2, the error for the model on
    stderr, the restore point unchanged), then a valid step and a graded submit (ActionProposed v2)."""
    script = EpisodeScript(codec, episode_id="ep-golden-invalid-reply")
    script.start()
    script.act(RunCommand("ls"))
    script.execute(stdout=b"calc.py\n")
    reply = "I will now fix the function so that it adds the numbers."
    error = "Your reply has no tool call. Reply with one action, for example a code block naming the file."
    script.act(InvalidReply.of(error, reply), response=reply)
    script.execute(exit_code=2, stderr=error.encode(), snapshot_id=script.snapshot_id, kind="streams")
    script.act(WriteFile("calc.py", b"def add(a, b):\n    return a + b\n"))
    script.execute()
    script.act(Submit())
    script.reward(1.0, Verdict.PASS, 2, 2)
    script.complete()
    return script.records


def truncated(codec: Codec) -> list[bytes]:
    """The step limit reached without a submit: the workspace is graded as it is, the episode completes."""
    script = EpisodeScript(codec, episode_id="ep-golden-truncated", config=EpisodeConfig(max_steps=2))
    script.start()
    script.act(RunCommand("cat calc.py"))
    script.execute(stdout=b"def add(a, b):\n    return a - b\n")
    script.act(WriteFile("calc.py", b"def add(a, b):\n    return a + b\n"))
    script.execute()
    script.reward(1.0, Verdict.PASS, 2, 2)
    script.complete()
    return script.records


def components(codec: Codec) -> list[bytes]:
    """A grade composed by a reward configuration (RewardAssigned v4): the outcome's share, each measured
    component apart, the configuration's version among the grade's versions."""
    script = EpisodeScript(codec, episode_id="ep-golden-components", config=EpisodeConfig(max_steps=8))
    script.start()
    script.act(WriteFile("calc.py", b"def add(a, b):\n    return a + b\n"))
    script.execute()
    script.act(Submit("fixed"))
    parts = (
        ("efficiency", 0.75),
        ("memory", 0.9),
        ("no_leftovers", 1.0),
        ("small_change", 0.96),
        ("speed", 0.98),
    )
    versions = GradeVersions("v" * 64, "sha256:" + "i" * 64, "t" * 64, "c" * 64)
    script.append(
        RewardAssigned(
            script.meta("verifier"), 1.1, Verdict.PASS, 2, 2, (), (), "verifier-1", versions=versions,
            duration_us=41_000, outcome_reward=1.0, components=parts,
        )
    )  # fmt: skip
    script.complete()
    return script.records


LOGS: dict[str, Callable[[Codec], list[bytes]]] = {
    "components": components,
    "invalid_reply": invalid_reply,
    "truncated": truncated,
    "completed": completed,
    "failed": failed,
    "redelivered": redelivered,
    "v1_steps": v1_steps,
}


def to_json(value: Any) -> Any:
    """A record as JSON: union branches chosen by name become {"type", "value"}; bytes become base64."""
    if isinstance(value, dict):
        return {key: to_json(item) for key, item in value.items()}
    if (
        isinstance(value, tuple)
        and len(value) == 2
        and isinstance(value[0], str)
        and isinstance(value[1], dict)
    ):
        return {"type": value[0], "value": to_json(value[1])}
    if isinstance(value, list | tuple):
        return [to_json(item) for item in value]
    if isinstance(value, bytes):
        return {"base64": base64.b64encode(value).decode()}
    return value


def expected_of(records: list[bytes], codec: Codec) -> dict[str, Any]:
    state = replay(records, codec)
    return {"records": len(records), "head_hash": state.head_hash, "state": to_json(state.to_record())}


def log_path(name: str) -> Path:
    return GOLDEN_DIR / f"{name}.log"


def state_path(name: str) -> Path:
    return GOLDEN_DIR / f"{name}.state.json"


def write_expected(name: str, codec: Codec) -> None:
    expected = expected_of(read_log(log_path(name)), codec)
    state_path(name).write_text(json.dumps(expected, indent=1, sort_keys=True) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    group = parser.add_mutually_exclusive_group(required=True)
    group.add_argument("--expected", action="store_true", help="rewrite every *.state.json from its log")
    group.add_argument("--logs", nargs="+", choices=sorted(LOGS), help="rewrite these logs and their states")
    args = parser.parse_args(argv)
    codec = default_codec()
    for name in args.logs or []:
        log_path(name).write_bytes(encode_log(LOGS[name](codec)))
    for name in args.logs or sorted(LOGS):
        write_expected(name, codec)
        print(f"wrote {state_path(name).relative_to(GOLDEN_DIR.parent.parent)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
