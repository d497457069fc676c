"""Debian packages the stack needs, installed on demand, and the machine's own apt mirror."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from ops.console import say
from streams.errors import StackError

_updated = False


def ensure_commands(packages_by_command: dict[str, str]) -> None:
    """Install the Debian package of each missing command (one apt run for all of them)."""
    missing = sorted({pkg for cmd, pkg in packages_by_command.items() if shutil.which(cmd) is None})
    if not missing:
        return
    if os.geteuid() != 0:
        raise StackError(
            f"missing Debian packages: {' '.join(missing)}",
            f"install them as root: apt-get install -y {' '.join(missing)}",
        )
    global _updated
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    if not _updated:
        say("   apt-get update")
        _run_apt(["apt-get", "update", "-qq"], env)
        _updated = True
    say(f"   apt-get install {' '.join(missing)}")
    _run_apt(["apt-get", "install", "-y", "-qq", "--no-install-recommends", *missing], env)


def _run_apt(argv: list[str], env: dict[str, str]) -> None:
    result = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise StackError(
            f"{' '.join(argv[:2])} failed (exit {result.returncode}): {result.stderr.strip()[-800:]}",
            "check that this machine can reach its Debian package mirror",
        )


def debian_mirror(sources_dir: Path = Path("/etc/apt")) -> str:
    """The machine's own Debian mirror, read at run time so that no host name is written into the repo."""
    if override := os.environ.get("TRIALOG_DEBIAN_MIRROR"):
        return override
    candidates = [sources_dir / "sources.list", *sorted((sources_dir / "sources.list.d").glob("*"))]
    for path in candidates:
        try:
            text = path.read_text()
        except (FileNotFoundError, IsADirectoryError, PermissionError):
            continue
        mirror = _mirror_from_deb822(text) if path.suffix == ".sources" else _mirror_from_one_line(text)
        if mirror:
            return mirror
    raise StackError(
        "no Debian mirror found in the machine's apt sources",
        "add a 'deb' source for bookworm to /etc/apt/sources.list, or set TRIALOG_DEBIAN_MIRROR",
    )


def _is_main_archive(uri: str, suites: str) -> bool:
    return "security" not in uri and "security" not in suites and uri.startswith(("http://", "https://"))


def _mirror_from_deb822(text: str) -> str | None:
    for stanza in re.split(r"\n\s*\n", text):
        fields: dict[str, str] = dict(
            (key.strip().lower(), value.strip())
            for key, _, value in (line.partition(":") for line in stanza.splitlines())
            if value and not key.startswith("#")
        )
        types, uris, suites = fields.get("types", ""), fields.get("uris", ""), fields.get("suites", "")
        for uri in uris.split():
            if "deb" in types.split() and _is_main_archive(uri, suites):
                return uri
    return None


def _mirror_from_one_line(text: str) -> str | None:
    for line in text.splitlines():
        parts = re.sub(r"\[[^\]]*\]", "", line).split()
        if len(parts) >= 3 and parts[0] == "deb" and _is_main_archive(parts[1], parts[2]):
            return parts[1]
    return None
