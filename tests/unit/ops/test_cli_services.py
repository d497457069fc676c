"""The run, audit-side and worker commands: values refused when parsed, a missing Kafka or Docker answered at
once with what to run (real processes, timed), --json errors as one JSON object, --help without heavy
imports, and the defaults the parser mirrors (so that --help needs no torch) equal to the libraries'."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from ops.cli import kit
from ops.cli.main import build_parser
from ops.paths import REPO_ROOT

# The fail-fast promise of issue 13: a command that needs a missing service answers within this, beyond
# what starting the CLI costs on this machine at this moment (`_startup_s`, measured beside it: a loaded
# CI machine can take seconds just to start Python, which says nothing about waiting for a service).
FAIL_FAST_S = 5.0
HEAVY = ("torch", "docker", "kafka", "faust")
# This session's modules: each must build its parser without a heavy import.
SERVICE_MODULES = (
    "ops.cli.run",
    "ops.cli.alerts",
    "ops.cli.audit",
    "ops.cli.replay",
    "ops.cli.report",
    "ops.cli.reproduce",
    "ops.cli.run_log_args",
    "ops.cli.workers.streams",
    "ops.cli.workers.sandbox",
    "ops.cli.workers.rollout",
    "ops.cli.workers.verifier",
    "ops.cli.workers.scheduler",
    "ops.cli.workers.learner",
)


def _heavy_imports(*modules: str) -> dict[str, list[str]]:
    """The heavy modules each of `modules` pulls in, imported in turn in one fresh interpreter (a heavy
    module is named under the first that imports it)."""
    code = (
        "import importlib, json, sys\n"
        "found, seen = {}, set()\n"
        f"for name in {list(modules)!r}:\n"
        "    importlib.import_module(name)\n"
        f"    found[name] = sorted(set({HEAVY!r}) & set(sys.modules) - seen)\n"
        "    seen.update(found[name])\n"
        "print(json.dumps(found))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    found: dict[str, list[str]] = json.loads(done.stdout)
    return found


def test_the_command_modules_of_runs_audits_and_workers_import_nothing_heavy() -> None:
    found = _heavy_imports(*SERVICE_MODULES)
    assert {module: heavy for module, heavy in found.items() if heavy} == {}


def test_the_whole_cli_imports_nothing_heavy() -> None:
    assert _heavy_imports("ops.cli.main") == {"ops.cli.main": []}


START = ["run", "start", "--tasks", "t", "--policy", "scripted"]
REFUSED = [
    ([*START, "--episodes", "0"], "--episodes"),
    ([*START, "--episodes", "2", "--capacity", "0"], "--capacity"),
    ([*START, "--episodes", "2", "--group-size", "x"], "--group-size"),
    ([*START, "--episodes", "2", "--max-steps", "-1"], "--max-steps"),
    ([*START, "--episodes", "2", "--metrics-port", "70000"], "--metrics-port"),
    (["run", "status", "r1", "--bootstrap", "localhost"], "--bootstrap"),
    # A run's id is part of topic names: a character Kafka refuses in one is refused when parsed.
    (["run", "status", "bad/run"], "RUN"),
    (["audit", "a run"], "RUN"),
    ([*START, "--episodes", "2", "--run", ".x"], "--run"),
    (["reproduce", "ep-1", "--run", "r:1"], "--run"),
    (["worker", "streams", "--run", "r/1"], "--run"),
    (["audit", "r1", "--timeout", "0"], "--timeout"),
    (["audit", "r1", "--timeout", "nan"], "--timeout"),
    (["audit", "r1", "--stale-after", "inf"], "--stale-after"),
    (["replay", "r1", "--output-chars", "0"], "--output-chars"),
    (["replay", "r1", "--from", "yesterday"], "--from"),
    (["alerts", "r1", "--since", "yesterday"], "--since"),
    (["alerts", "r1", "--rule", "reward_colapse"], "--rule"),
    (["alerts", "r:1"], "RUN"),
    (["report", "r1", "--out", "d", "--timeout", "-5"], "--timeout"),
    (["reproduce", "e1", "--run", "r1", "--bootstrap", "h:99999"], "--bootstrap"),
    (["worker", "streams", "--temperature", "-0.1"], "--temperature"),
    (["worker", "streams", "--top-p", "0"], "--top-p"),
    (["worker", "streams", "--top-p", "1.5"], "--top-p"),
    (["worker", "streams", "--max-tokens", "0"], "--max-tokens"),
    (["worker", "streams", "--standby-replicas", "-1"], "--standby-replicas"),
    (["worker", "streams", "--grade-steps", "sometimes"], "--grade-steps"),
    (["worker", "streams", "--grade-steps", "every:0"], "--grade-steps"),
    (["run", "start", "--policy", "scripted", "--tasks", "t", "--grade-steps", "all"], "--grade-steps"),
    (["worker", "learner", "--process-reward-coef", "-0.5"], "--process-reward-coef"),
    (["worker", "sandbox", "--pool", "-1"], "--pool"),
    (["worker", "sandbox", "--max-episodes", "0"], "--max-episodes"),
    (["worker", "sandbox", "--runtime", "run c"], "--runtime"),
    (["worker", "rollout", "--batch", "0"], "--batch"),
    (["worker", "rollout", "--max-new-tokens", "0"], "--max-new-tokens"),
    (["worker", "rollout", "--threads", "-1"], "--threads"),
    (["worker", "rollout", "--pin-version", "-1"], "--pin-version"),
    (["worker", "scheduler", "--episodes", "0"], "--episodes"),
    (["worker", "learner", "--group-size", "1"], "--group-size"),
    (["worker", "learner", "--group-timeout-s", "0"], "--group-timeout-s"),
    (["worker", "learner", "--max-staleness", "-1"], "--max-staleness"),
    (["worker", "learner", "--lr", "0"], "--lr"),
    (["worker", "learner", "--lr", "nan"], "--lr"),
    (["worker", "learner", "--micro-batch", "0"], "--micro-batch"),
    (["worker", "learner", "--epochs", "0"], "--epochs"),
    (["worker", "learner", "--temperature", "0"], "--temperature"),
    (["worker", "learner", "--lora-alpha", "-1"], "--lora-alpha"),
    (["worker", "learner", "--idle-checkpoint-s", "0"], "--idle-checkpoint-s"),
]  # fmt: skip


@pytest.mark.parametrize(("argv", "option"), REFUSED, ids=[" ".join(argv) for argv, _ in REFUSED])
def test_a_bad_value_is_refused_when_parsed(
    argv: list[str], option: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args(argv)
    assert exited.value.code == 2
    assert f"argument {option}" in capsys.readouterr().err


HELPED = [
    ["run", "start"], ["run", "status"], ["alerts"], ["audit"], ["replay"], ["report"], ["reproduce"],
    *(["worker", kind] for kind in ("streams", "sandbox", "rollout", "verifier", "scheduler", "learner")),
]  # fmt: skip


@pytest.mark.parametrize("command", HELPED, ids=[" ".join(c) for c in HELPED])
def test_each_command_shows_examples_and_its_defaults(
    command: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "200")  # one option a line: the assertions read whole lines
    with pytest.raises(SystemExit) as exited:
        build_parser().parse_args([*command, "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert "Examples:" in out and f"trialog {' '.join(command)}" in out.split("Examples:")[1]
    assert "(default: None)" not in out and "(default: False)" not in out


def test_the_defaults_in_help_are_the_ones_the_libraries_use() -> None:
    """--help shows the learner's and the audit side's defaults without importing torch or the codec: the
    values live in light modules that the libraries use too (not copies)."""
    import inspect

    from learner import loop, lora, samples
    from ops import audit
    from ops.cli import audit as audit_cli
    from ops.cli import replay as replay_cli
    from ops.cli.workers import learner as learner_cli

    assert (learner_cli.DEFAULT_RANK, learner_cli.DEFAULT_TARGETS) == (
        lora.DEFAULT_RANK,
        lora.DEFAULT_TARGETS,
    )
    assert learner_cli.PROMPT_ENCODERS == samples.PROMPT_ENCODERS
    assert learner_cli.IDLE_CHECKPOINT_S == loop.IDLE_CHECKPOINT_S
    assert audit_cli.DEFAULT_STALE_AFTER_S == audit.DEFAULT_STALE_AFTER_S
    assert (
        inspect.signature(loop.run).parameters["idle_checkpoint_s"].default == learner_cli.IDLE_CHECKPOINT_S
    )
    replay_parser = build_parser()
    assert replay_parser.parse_args(["replay", "r1"]).output_chars == replay_cli.DEFAULT_OUTPUT_CHARS == 400


def _trialog(argv: list[str], env: dict[str, str]) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "ops.cli", *argv], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
        timeout=60,
    )  # fmt: skip
    return done, time.monotonic() - started


def _startup_s(env: dict[str, str]) -> float:
    """What `trialog --version` takes now: the CLI's start, with no service touched."""
    done, took = _trialog(["--version"], env)
    assert done.returncode == 0, done.stderr
    return took


@pytest.fixture
def bare_env(tmp_path: Path) -> dict[str, str]:
    """No stack: an empty TRIALOG_HOME, no Docker engine at DOCKER_HOST, tracing off."""
    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "TRIALOG_HOME": str(home), "TRIALOG_TRACING": "off"}
    env["DOCKER_HOST"] = f"unix://{tmp_path / 'no-docker.sock'}"
    return env


# (argv, has --json): each with --bootstrap on a closed port.
NEEDS_KAFKA = [
    (["run", "status", "r1"], True),
    (["run", "start", "--tasks", "examples/tasks", "--episodes", "2", "--policy", "scripted"], False),
    (["alerts", "r1"], True),
    (["alerts", "--follow", "r1"], True),
    (["audit", "r1"], True),
    (["replay", "r1"], True),
    (["report", "r1", "--out", "OUT"], False),
    (["reproduce", "e1", "--run", "r1"], True),
]


@pytest.mark.parametrize(("argv", "has_json"), NEEDS_KAFKA, ids=[" ".join(a[:2]) for a, _ in NEEDS_KAFKA])
def test_a_command_without_kafka_answers_at_once_with_the_fix(
    argv: list[str], has_json: bool, bare_env: dict[str, str], tmp_path: Path, closed_port: Callable[[], int]
) -> None:
    argv = [str(tmp_path / "out") if arg == "OUT" else arg for arg in argv]
    closed = f"127.0.0.1:{closed_port()}"  # nothing listens there
    done, took = _trialog([*argv, "--bootstrap", closed, *(["--json"] if has_json else [])], bare_env)
    assert done.returncode == 2, done.stderr
    startup = _startup_s(bare_env)
    assert took - startup < FAIL_FAST_S, f"{took:.1f} s ({startup:.1f} s to start the CLI)"
    assert "Traceback" not in done.stderr and "trialog up" in done.stderr
    command = " ".join(argv[:2] if argv[0] == "run" else argv[:1])  # the command's name, not its operands
    # One line: what is missing and, in the same line, what to run.
    assert done.stderr.splitlines() == [
        f"trialog {command}: no Kafka broker answers at {closed} ({kit.KAFKA_HINT})"
    ]
    if has_json:
        error = json.loads(done.stdout)
        assert error["error"] == f"no Kafka broker answers at {closed}" and "trialog up" in error["hint"]
    else:
        assert done.stdout == ""


@pytest.mark.parametrize(
    "argv",
    [
        ["worker", "sandbox", "--run", "r1"],
        ["worker", "verifier", "--run", "r1", "--tasks", "examples/tasks"],
    ],
)
def test_a_sandbox_or_verifier_worker_without_docker_exits_at_once(
    argv: list[str], bare_env: dict[str, str], closed_port: Callable[[], int]
) -> None:
    from ops.stack.docker_engine import SYSTEM_SOCKET, ping

    if ping(SYSTEM_SOCKET, timeout_s=1) is None:
        pytest.skip(f"a Docker engine answers on {SYSTEM_SOCKET}: this machine has no engine-less case")
    # Kafka is not needed to fail: the worker would wait for it, but Docker is checked first.
    done, took = _trialog([*argv, "--bootstrap", f"127.0.0.1:{closed_port()}"], bare_env)
    assert done.returncode == 2, done.stderr
    startup = _startup_s(bare_env)
    assert took - startup < FAIL_FAST_S, f"{took:.1f} s ({startup:.1f} s to start the CLI)"
    assert "Traceback" not in done.stderr and "no Docker engine answers" in done.stderr
    assert "trialog up" in done.stderr


def test_a_run_whose_training_tasks_overlap_its_evaluation_set_refuses_to_start(
    bare_env: dict[str, str], tmp_path: Path, closed_port: Callable[[], int]
) -> None:
    renamed = tmp_path / "eval" / "copy-of-add"
    shutil.copytree(REPO_ROOT / "examples" / "tasks" / "easy-fix-add", renamed)
    toml = renamed / "task.toml"
    toml.write_text(toml.read_text().replace('id = "easy-fix-add"', 'id = "copy-of-add"'))
    closed = f"127.0.0.1:{closed_port()}"  # refused before Kafka is asked anything
    argv = ["run", "start", "--tasks", "examples/tasks", "--episodes", "2", "--policy", "scripted"]
    done, _ = _trialog([*argv, "--eval", str(tmp_path / "eval"), "--bootstrap", closed], bare_env)
    assert done.returncode == 2, done.stderr
    assert "overlap the evaluation set" in done.stderr and "easy-fix-add" in done.stderr
    assert "Kafka" not in done.stderr
