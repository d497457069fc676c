from __future__ import annotations

from pathlib import Path

import pytest

from ops.stack.apt import debian_mirror
from streams.errors import StackError


def _sources(tmp_path: Path, files: dict[str, str]) -> Path:
    (tmp_path / "sources.list.d").mkdir()
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return tmp_path


def test_reads_the_main_archive_from_deb822_and_skips_security(tmp_path: Path) -> None:
    root = _sources(
        tmp_path,
        {
            "sources.list.d/debian.sources": (
                "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n\n"
                "Types: deb\n# a comment\nURIs: http://mirror.example/debian\n"
                "Suites: bookworm bookworm-updates\n"
            )
        },
    )
    assert debian_mirror(root) == "http://mirror.example/debian"


def test_reads_one_line_format_with_options(tmp_path: Path) -> None:
    root = _sources(
        tmp_path,
        {
            "sources.list": (
                "# deb http://commented.example/debian bookworm main\n"
                "deb-src http://src.example/debian bookworm main\n"
                "deb [arch=amd64 signed-by=/k.gpg] https://one.example/debian bookworm main\n"
            )
        },
    )
    assert debian_mirror(root) == "https://one.example/debian"


def test_environment_overrides_the_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRIALOG_DEBIAN_MIRROR", "http://override.example/debian")
    assert debian_mirror(_sources(tmp_path, {})) == "http://override.example/debian"


def test_no_mirror_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TRIALOG_DEBIAN_MIRROR", raising=False)
    with pytest.raises(StackError, match="no Debian mirror") as raised:
        debian_mirror(_sources(tmp_path, {"sources.list": "deb-src http://x.example/debian bookworm main\n"}))
    assert "TRIALOG_DEBIAN_MIRROR" in raised.value.hint
