"""An image layer for a project whose tests need more than the sandbox image has: wheels from PyPI.

Synthesis never installs anything inside a sandbox (sandboxes have no network). The wheels the project's
tests need are fetched on this machine at set-up (`pip download --only-binary :all:`, dependencies
included, into the cache), then a layer is built on the sandbox image that unpacks them into
/usr/local/lib/python3.11/dist-packages (a wheel is a zip of importable files; scripts and data folders
are not installed, which test-only libraries do not need). The tag is a content hash of the base image's
tag and the wheels' names and bytes: the same wheels give the same image, and tasks name it in `image`.
Built with no network, like every trialog image.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

import docker
from docker.errors import ImageNotFound

from actors.tasks.harness.trialog_launch import TRUSTED_PYCACHE
from ops.paths import Paths
from ops.stack.images import ImageRef, build_from, sandbox_ref
from streams.errors import StackError

SITE = "/usr/local/lib/python3.11/dist-packages"
DOCKERFILE = """ARG BASE_IMAGE
FROM ${BASE_IMAGE}
USER root
COPY wheels /tmp/trialog-wheels
COPY unpack.py /tmp/trialog-unpack.py
RUN python3 /tmp/trialog-unpack.py && rm -rf /tmp/trialog-wheels /tmp/trialog-unpack.py
USER agent
"""
UNPACK = f"""import glob, zipfile
for wheel in sorted(glob.glob("/tmp/trialog-wheels/*.whl")):
    zipfile.ZipFile(wheel).extractall("{SITE}")
import compileall, sys
# Into the harness's trusted bytecode prefix (see the sandbox image's Dockerfile), as root.
sys.pycache_prefix = "{TRUSTED_PYCACHE}"
compileall.compile_dir("{SITE}", quiet=1)
"""


def download_wheels(requirements: Sequence[str], paths: Paths) -> list[Path]:
    """The wheels of `requirements` and their dependencies, from PyPI into the cache (once)."""
    if not requirements:
        return []
    dest = paths.cache / "synth" / "wheels" / _digest([r.encode() for r in sorted(requirements)])
    if (dest / ".complete").exists():
        return sorted(dest.glob("*.whl"))
    dest.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable, "-m", "pip", "download", "--quiet", "--only-binary", ":all:", "--dest", str(dest),
        *requirements,
    ]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, timeout=900, check=False)
    if done.returncode != 0:
        raise StackError(
            f"pip could not download wheels for {' '.join(requirements)}: {done.stderr.strip()[-500:]}",
            "check the requirements (each needs a wheel on PyPI for Python 3.11)",
        )
    (dest / ".complete").write_text("\n".join(requirements) + "\n")
    return sorted(dest.glob("*.whl"))


def layer_ref(wheels: Sequence[Path], base: ImageRef | None = None) -> ImageRef:
    base = base or sandbox_ref()
    parts = [str(base).encode()] + [wheel.name.encode() + wheel.read_bytes() for wheel in sorted(wheels)]
    return ImageRef("trialog-synth", _digest(parts))


def ensure_layer(client: docker.DockerClient, wheels: Sequence[Path], base: ImageRef | None = None) -> str:
    """The tag of the sandbox image with `wheels` unpacked into its site-packages (built if missing)."""
    base = base or sandbox_ref()
    for wheel in wheels:
        if wheel.suffix != ".whl" or not wheel.is_file():
            raise StackError(
                f"{wheel} is not a wheel file", "name .whl files (pip download --only-binary :all:)"
            )
    ref = layer_ref(wheels, base)
    try:
        client.images.get(str(ref))
        return str(ref)
    except ImageNotFound:
        pass
    with tempfile.TemporaryDirectory(prefix="trialog-synth-layer-") as context:
        folder = Path(context)
        (folder / "wheels").mkdir()
        for wheel in wheels:
            shutil.copy2(wheel, folder / "wheels" / wheel.name)
        (folder / "Dockerfile").write_text(DOCKERFILE)
        (folder / "unpack.py").write_text(UNPACK)
        build_from(client, folder, ref, base)
    return str(ref)


def _digest(parts: Sequence[bytes]) -> str:
    hasher = hashlib.sha256(b"trialog-synth-layer-v1\0")
    for part in parts:
        hasher.update(len(part).to_bytes(8, "little") + part)
    return hasher.hexdigest()[:12]
