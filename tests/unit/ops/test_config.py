"""The configuration file and environment (`ops.cli.config`): option > variable > file > built-in default,
every key checked by name before anything runs, the file's values handed to the environment, `[worker.KIND]`
tables as option defaults, and `trialog config show` saying where each value came from."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest

from ops.cli import config
from ops.cli.main import build_parser
from ops.paths import REPO_ROOT

FILE = """
[kafka]
bootstrap = "file-kafka:9092"
security_protocol = "SASL_SSL"
sasl_mechanism = "SCRAM-SHA-512"
sasl_password = "from-the-file"

[run]
id = "filerun"

[objects]
store = "s3://bucket/prefix"

[telemetry]
otlp_endpoint = "http://collector:4317"
tracing = false

[health]
port = 8080
host = "0.0.0.0"
grace_s = 20

[worker.sandbox]
max-episodes = 3
pool = 0

[worker.verifier]
static_signals = true
"""


def _configured(tmp_path: Path, text: str, argv: list[str], environ: dict[str, str]) -> argparse.Namespace:
    path = tmp_path / "trialog.toml"
    path.write_text(text)
    parser = build_parser()
    config.configure(parser, ["--config", str(path), *argv], environ)
    return parser.parse_args(["--config", str(path), *argv])


def test_option_beats_variable_beats_file_beats_default(tmp_path: Path) -> None:
    argv = ["worker", "sandbox"]
    from_file = _configured(tmp_path, FILE, argv, {})
    assert (from_file.bootstrap, from_file.run, from_file.health_port, from_file.health_host) == (
        "file-kafka:9092", "filerun", 8080, "0.0.0.0",
    )  # fmt: skip
    assert (from_file.grace_s, from_file.max_episodes, from_file.pool) == (20.0, 3, 0)
    assert from_file.liveness_s == 300.0  # in no file and no variable: the built-in default

    environ = {"TRIALOG_BOOTSTRAP": "env-kafka:9092", "TRIALOG_RUN": "envrun", "TRIALOG_GRACE_S": "10"}
    from_env = _configured(tmp_path, FILE, argv, environ)
    assert (from_env.bootstrap, from_env.run, from_env.grace_s) == ("env-kafka:9092", "envrun", 10.0)

    flags = [*argv, "--bootstrap", "flag-kafka:9092", "--run", "flagrun", "--grace-s", "5", "--pool", "4"]
    from_flags = _configured(tmp_path, FILE, flags, environ)
    assert (from_flags.bootstrap, from_flags.run, from_flags.grace_s, from_flags.pool) == (
        "flag-kafka:9092", "flagrun", 5.0, 4,
    )  # fmt: skip


def test_the_files_values_reach_the_environment_where_unset(tmp_path: Path) -> None:
    environ = {"TRIALOG_KAFKA_SASL_MECHANISM": "PLAIN"}
    _configured(tmp_path, FILE, ["worker", "rollout"], environ)
    assert environ["TRIALOG_KAFKA_SECURITY_PROTOCOL"] == "SASL_SSL"
    assert environ["TRIALOG_KAFKA_SASL_MECHANISM"] == "PLAIN"  # the variable wins over the file
    assert environ["TRIALOG_KAFKA_SASL_PASSWORD"] == "from-the-file"
    assert environ["TRIALOG_OBJECT_STORE"] == "s3://bucket/prefix"
    assert environ["OTEL_EXPORTER_OTLP_ENDPOINT"] == "http://collector:4317"
    assert environ["TRIALOG_TRACING"] == "off"
    assert environ["TRIALOG_CONFIG"] == str(tmp_path / "trialog.toml")  # for the processes started from here


def test_a_worker_switch_from_the_file(tmp_path: Path) -> None:
    args = _configured(tmp_path, FILE, ["worker", "verifier", "--tasks", str(tmp_path)], {})
    assert args.static_signals is True


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("[kafka]\nbootstrapp = 'k:9092'\n", "kafka.bootstrapp"),
        ("[kafak]\nbootstrap = 'k:9092'\n", "[kafak]"),
        ("run = 'r1'\n", "run must be a table"),
        ("[kafka]\nbootstrap = 'nohost'\n", "kafka.bootstrap"),
        ("[kafka]\nsecurity_protocol = 'TLS'\n", "kafka.security_protocol"),
        ("[run]\nid = 'bad/run'\n", "run.id"),
        ("[objects]\nstore = 'gs://bucket'\n", "objects.store"),
        ("[health]\nport = 70000\n", "health.port"),
        ("[health]\ngrace_s = 0\n", "health.grace_s"),
        ("[health]\nport = [1]\n", "health.port must be a string"),
        ("[worker.sandbox]\nmax-episodes = 0\n", "worker.sandbox.max-episodes"),
        ("[worker.sandbox]\nmax-episode = 2\n", "worker.sandbox.max-episode"),
        ("[worker.sandbx]\npool = 2\n", "[worker.sandbx]"),
        ("[worker.verifier]\ntasks = ['/t']\n", "worker.verifier.tasks"),
        ("[worker.verifier]\nstatic-signals = 'yes'\n", "worker.verifier.static-signals"),
        ("[worker.rollout]\npolicy = 'clever'\n", "worker.rollout.policy"),
        ("[kafka\n", "cannot read"),
    ],
)
def test_a_bad_file_is_refused_naming_the_key(tmp_path: Path, text: str, named: str) -> None:
    with pytest.raises(config.ConfigError) as refused:
        _configured(tmp_path, text, ["config", "show"], {})
    assert named in refused.value.message and str(tmp_path / "trialog.toml") in refused.value.message


def test_a_bad_variable_is_refused_naming_it() -> None:
    with pytest.raises(config.ConfigError, match=r"\$TRIALOG_HEALTH_PORT: health.port"):
        config.configure(build_parser(), ["config", "show"], {"TRIALOG_HEALTH_PORT": "http"})


def test_the_file_is_named_before_the_command_or_by_the_variable() -> None:
    environ = {"TRIALOG_CONFIG": "/env.toml"}
    assert config.config_path(["--config", "/a.toml", "status"], environ) == Path("/a.toml")
    assert config.config_path(["--config=/b.toml", "status"], environ) == Path("/b.toml")
    # After the command, `--config` would be that command's own option: the variable names the file.
    assert config.config_path(["worker", "rollout", "--config", "/c.toml"], environ) == Path("/env.toml")
    assert config.config_path(["status"], {}) is None


def test_config_show_says_where_each_value_came_from(tmp_path: Path) -> None:
    path = tmp_path / "trialog.toml"
    path.write_text(FILE)
    done = subprocess.run(
        [sys.executable, "-m", "ops.cli", "--config", str(path), "config", "show", "--json"],
        cwd=REPO_ROOT, capture_output=True, text=True, check=False,
        env={"PATH": "/usr/bin:/bin", "TRIALOG_HOME": str(tmp_path), "TRIALOG_RUN": "envrun"},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    shown = json.loads(done.stdout)
    keys = {entry["key"]: entry for entry in shown["keys"]}
    assert shown["file"] == str(path)
    assert (keys["kafka.bootstrap"]["value"], keys["kafka.bootstrap"]["source"]) == (
        "file-kafka:9092",
        "file",
    )
    assert (keys["run.id"]["value"], keys["run.id"]["source"]) == ("envrun", "env")
    assert (keys["health.liveness_s"]["value"], keys["health.liveness_s"]["source"]) == (None, "default")
    assert keys["kafka.sasl_password"]["value"] == "***"  # never printed
    assert keys["kafka.bootstrap"]["option"] == "--bootstrap"
    assert {"worker": "sandbox", "option": "--max-episodes", "value": "3", "source": "file"} in shown[
        "workers"
    ]


def test_a_bad_file_under_json_is_one_json_object(tmp_path: Path) -> None:
    path = tmp_path / "trialog.toml"
    path.write_text("[kafka]\nbrokers = 'k:9092'\n")
    done = subprocess.run(
        [sys.executable, "-m", "ops.cli", "--config", str(path), "config", "show", "--json"],
        cwd=REPO_ROOT, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 2
    assert "kafka.brokers" in json.loads(done.stdout)["error"]


def test_the_readme_documents_every_key() -> None:
    readme = (REPO_ROOT / "ops" / "README.md").read_text()
    for key in config.KEYS:
        assert f"`{key.name}`" in readme and f"`{key.env}`" in readme, key.name
