"""`trialog report` on a real run, opened in headless Chromium: it must render with no console message.

The check reads Chromium's own log (`--enable-logging=stderr --v=0`), where every console message of the
page appears as a `CONSOLE` line (uncaught errors included); the page has no script, so any such line is a
fault. A page with a deliberate script error must fail the same check: otherwise the check checks nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from ops.cli import report as report_cli
from ops.cli.main import main as trialog
from ops.report.links import trace_id
from tests.integration.audit_side.conftest import RealRun

CHROMIUM = Path("/usr/bin/chromium")
BROWSER_TIMEOUT_S = 180


@pytest.fixture(scope="session")
def chromium() -> Path:
    """Debian's chromium, installed here when missing (nothing else is cached)."""
    if not CHROMIUM.exists():
        env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
        install = [
            "apt-get",
            "-o",
            "DPkg::Lock::Timeout=600",
            "install",
            "-y",
            "--no-install-recommends",
            "chromium",
        ]
        result = subprocess.run(install, env=env, capture_output=True, text=True, timeout=1200, check=False)
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert CHROMIUM.exists()
    return CHROMIUM


@dataclass(frozen=True)
class Rendered:
    dom: str
    console: list[str]


def render(browser: Path, page: Path, profile: Path) -> Rendered:
    """The page's DOM after load, and every console message Chromium logged for it."""
    profile.mkdir(parents=True, exist_ok=True)
    argv = [
        str(browser), "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
        f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0", "--dump-dom", page.as_uri(),
    ]  # fmt: skip
    result = subprocess.run(argv, capture_output=True, text=True, timeout=BROWSER_TIMEOUT_S, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    console = [line for line in result.stderr.splitlines() if ":CONSOLE" in line]
    return Rendered(result.stdout, console)


def _episode_ids(dom: str) -> list[str]:
    """The episode ids shown as trace links (the text of each link)."""
    return [part.split(">", 1)[1].split("<", 1)[0] for part in dom.split("<a href=")[1:]]


def test_the_console_check_catches_a_page_with_a_script_error(chromium: Path, tmp_path: Path) -> None:
    page = tmp_path / "broken.html"
    page.write_text("<!DOCTYPE html><html><body><h1>hi</h1><script>noSuchFunction();</script></body></html>")
    rendered = render(chromium, page, tmp_path / "profile")
    assert "<h1>hi</h1>" in rendered.dom
    assert any("noSuchFunction" in line for line in rendered.console), rendered.console


def test_the_report_of_a_real_run_renders_without_console_errors(
    real_run: RealRun, chromium: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "report"
    argv = [
        real_run.name,
        "--out",
        str(out),
        "--bootstrap",
        real_run.bootstrap,
        "--jaeger",
        "http://127.0.0.1:1",
    ]
    assert trialog(["report", *argv]) == 0
    page = out / report_cli.PAGE
    assert capsys.readouterr().out.strip() == str(page)
    rendered = render(chromium, page, tmp_path / "profile")
    assert rendered.console == [], rendered.console
    dom = rendered.dom
    assert f"trialog run {real_run.name}" in dom and "completed / failed / in flight" in dom
    assert dom.count("<svg") >= 7  # reward, rate, three stage histograms, sandbox time, failures
    assert "No trajectory was consumed by a learner" in dom and "No episode failed." in dom
    links = {line.split("/trace/")[1][:32] for line in dom.split("href=")[1:] if "/trace/" in line}
    assert len(links) == 2 and all(len(link) == 32 for link in links)  # the two completed episodes
    assert all(trace_id(e) in links for e in _episode_ids(dom))
    shutil.rmtree(tmp_path / "profile", ignore_errors=True)
