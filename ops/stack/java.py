"""The machine's Java runtime (17+), used by the local Kafka process and mounted into the Kafka image."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from streams.errors import StackError

_PREFERRED = (Path("/usr/lib/jvm/java-17-openjdk-amd64"), Path("/usr/lib/jvm/java-17-openjdk-arm64"))


def java_home() -> Path:
    candidates = [Path(os.environ["JAVA_HOME"])] if os.environ.get("JAVA_HOME") else []
    candidates += list(_PREFERRED)
    if found := shutil.which("java"):
        candidates.append(Path(found).resolve().parent.parent)
    for home in candidates:
        if (home / "bin" / "java").exists() and _major_version(home) >= 17:
            return home.resolve()
    raise StackError(
        "no Java 17+ runtime found (looked at JAVA_HOME, /usr/lib/jvm, and `java` on PATH)",
        "install one: apt-get install -y openjdk-17-jre-headless",
    )


def _major_version(home: Path) -> int:
    result = subprocess.run(
        [str(home / "bin" / "java"), "-version"], capture_output=True, text=True, check=False
    )
    match = re.search(r'version "(\d+)', result.stderr)
    return int(match.group(1)) if match else 0


def host_paths_of_runtime(home: Path) -> list[Path]:
    """JAVA_HOME plus the /etc folders its symlinks point into (Debian keeps the runtime's config there).

    The Kafka container mounts exactly these read-only, so the host's runtime works inside the image.
    Links to documentation or desktop libraries are not needed by a headless broker and are left out.
    """
    config_dirs = {
        link.resolve().parent
        for link in home.rglob("*")
        if link.is_symlink() and link.resolve().is_relative_to("/etc") and link.resolve().exists()
    }
    outermost = [d for d in config_dirs if not any(d != o and d.is_relative_to(o) for o in config_dirs)]
    return [home, *sorted(outermost)]
