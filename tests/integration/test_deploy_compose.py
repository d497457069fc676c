"""ops/deploy/compose.yaml as `docker compose` reads it: compose-go (the library of `docker compose`),
built into `compose-check` by set-up (`ops.stack.compose_check`), loads the file (the Compose
Specification's schema, interpolation, anchors and merge keys, the loader's own checks), and every command
line of the project it loaded parses with trialog's own parser and its configuration file. This engine
(Debian's docker.io) has no compose plugin; compose-go is the part of it that reads the file."""

from __future__ import annotations

from pathlib import Path

import pytest

from ops.paths import REPO_ROOT, Paths
from ops.stack import compose_check
from tests.unit.ops.test_deploy import WORKER_KINDS, _parser_with

DEPLOY = REPO_ROOT / "ops" / "deploy"


@pytest.fixture(scope="module")
def loaded(stack_paths: Paths) -> dict[str, object]:
    checked = compose_check.check(stack_paths, DEPLOY / "compose.yaml")
    assert checked.project is not None, checked.error
    return checked.project


def test_the_compose_file_loads_with_every_worker_on_the_hosts_network(loaded: dict[str, object]) -> None:
    services = loaded["services"]
    assert isinstance(services, dict)
    assert {service["command"][1] for service in services.values()} == WORKER_KINDS
    for name, service in services.items():
        # The merge key gave each service the shared worker settings (a merge gone wrong loses them).
        assert service["entrypoint"] == ["trialog"] and service["network_mode"] == "host", name
        assert service["environment"]["TRIALOG_CONFIG"] == "/etc/trialog/trialog.toml", name
        assert service["stop_grace_period"] == "30s", name
        # Long-lived workers come back; the scheduler, which exits when its run is done, only on a failure.
        wanted = "on-failure" if name == "scheduler" else "unless-stopped"
        assert service["restart"] == wanted, name
    # No network of its own: this project's engine runs without a bridge (ops/README.md).
    assert not loaded.get("networks"), loaded.get("networks")


def test_every_loaded_command_line_parses_with_trialogs_parser(loaded: dict[str, object]) -> None:
    services = loaded["services"]
    assert isinstance(services, dict)
    for name, service in services.items():
        environment = {key: str(value) for key, value in service["environment"].items()}
        args = _parser_with(DEPLOY / "trialog.toml", environment).parse_args(service["command"])
        assert args.worker_kind == service["command"][1], name


def test_a_mistyped_key_is_refused_by_the_checker(stack_paths: Paths, tmp_path: Path) -> None:
    text = (DEPLOY / "compose.yaml").read_text()
    bad = tmp_path / "compose.yaml"
    bad.write_text(text.replace("  stop_grace_period: 30s", "  stop_grace_periods: 30s", 1))
    (tmp_path / "trialog.toml").write_text((DEPLOY / "trialog.toml").read_text())
    checked = compose_check.check(stack_paths, bad)
    assert checked.project is None and "stop_grace_periods" in checked.error, checked.error
