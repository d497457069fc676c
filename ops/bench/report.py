"""What every benchmark writes: its own `## NAME` section of BENCHMARKS.md, and the machine it ran on."""

from __future__ import annotations

import os
import platform
import re
from pathlib import Path


def write_section(path: Path, section: str) -> None:
    """Replace the section of `path` that starts with `section`'s first line (up to the next `## `), or
    append it: each benchmark owns one section and leaves the others alone."""
    heading = section.splitlines()[0]
    text = path.read_text() if path.exists() else "# Benchmarks\n"
    pattern = re.compile(rf"^{re.escape(heading)}\n.*?(?=^## |\Z)", re.MULTILINE | re.DOTALL)
    if pattern.search(text):
        text = pattern.sub(lambda _: section.rstrip("\n") + "\n\n", text, count=1)
    else:
        text = text.rstrip("\n") + "\n\n" + section
    path.write_text(text.rstrip("\n") + "\n")


def cpu_model() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine()
    match = re.search(r"^model name\s*:\s*(.+)$", text, re.MULTILINE)
    return match.group(1).strip() if match else platform.machine()


def memory_gib() -> float:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
