"""Local images, never pulled: a debootstrapped Debian base, then `docker build` layers on top of it.

Every tag is a content hash of its recipe (and of its base's tag), so a changed recipe gives a new tag and
an unchanged one is found and reused. The base root filesystem tarball is cached, so a fresh Docker engine
only pays for `docker import` and the small layers.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import docker
from docker.errors import BuildError, ImageNotFound

from ops.console import say
from ops.paths import REPO_ROOT, Paths
from ops.stack.apt import debian_mirror, ensure_commands
from streams.errors import StackError

IMAGES_DIR = REPO_ROOT / "ops" / "images"
BASE_RECIPE = IMAGES_DIR / "base.txt"
DERIVED = ("sandbox", "kafka")
STATIC_TOOLS = "static-tools.txt"  # a derived image's pinned wheels, fetched on the host for its build


@dataclass(frozen=True)
class ImageRef:
    name: str
    tag: str

    def __str__(self) -> str:
        return f"{self.name}:{self.tag}"


def _digest(*parts: bytes) -> str:
    hasher = hashlib.sha256()
    for part in parts:
        hasher.update(len(part).to_bytes(8, "little"))
        hasher.update(part)
    return hasher.hexdigest()[:12]


def _recipe() -> dict[str, str]:
    lines = [line.strip() for line in BASE_RECIPE.read_text().splitlines()]
    pairs = (line.split("=", 1) for line in lines if line and not line.startswith("#"))
    return {key.strip(): value.strip() for key, value in pairs}


def base_ref() -> ImageRef:
    return ImageRef("trialog-base", _digest(BASE_RECIPE.read_bytes()))


def derived_ref(kind: str) -> ImageRef:
    folder = IMAGES_DIR / kind
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    parts = [str(base_ref()).encode()] + [
        p.relative_to(folder).as_posix().encode() + p.read_bytes() for p in files
    ]
    return ImageRef(f"trialog-{kind}", _digest(*parts))


def sandbox_ref() -> ImageRef:
    return derived_ref("sandbox")


def kafka_ref() -> ImageRef:
    return derived_ref("kafka")


def _exists(client: docker.DockerClient, ref: ImageRef) -> bool:
    try:
        client.images.get(str(ref))
    except ImageNotFound:
        return False
    return True


def ensure_all(client: docker.DockerClient, paths: Paths) -> list[ImageRef]:
    base = base_ref()
    if not _exists(client, base):
        tarball = _rootfs_tarball(paths, base)
        say(f"   docker import {tarball.name} -> {base}")
        client.api.import_image_from_file(str(tarball), repository=base.name, tag=base.tag)
    built = [base]
    for kind in DERIVED:
        ref = derived_ref(kind)
        if not _exists(client, ref):
            say(f"   docker build {IMAGES_DIR / kind} -> {ref}")
            _build(client, kind, ref, base, paths)
        built.append(ref)
    return built


def _build(client: docker.DockerClient, kind: str, ref: ImageRef, base: ImageRef, paths: Paths) -> None:
    folder = IMAGES_DIR / kind
    pins = folder / STATIC_TOOLS
    if not pins.exists():
        build_from(client, folder, ref, base)
        return
    wheels = static_tool_wheels(pins, paths.cached("wheels") / "static-tools")
    with tempfile.TemporaryDirectory(prefix="trialog-build-") as scratch:
        context = Path(scratch) / kind
        shutil.copytree(folder, context)
        (context / "wheels").mkdir()
        for wheel in wheels:
            shutil.copy2(wheel, context / "wheels" / wheel.name)
        build_from(client, context, ref, base)


def static_tool_wheels(pins: Path, cache: Path) -> list[Path]:
    """The wheels `pins` names (versions and sha256s) for the sandbox's CPython 3.11 on manylinux x86_64,
    from PyPI once, then from the cache; pip checks every hash (`--require-hashes`)."""
    cache.mkdir(parents=True, exist_ok=True)
    argv = [
        sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps",
        "--only-binary=:all:", "--require-hashes", "--platform", "manylinux2014_x86_64", "--python-version",
        "3.11", "--implementation", "cp", "--abi", "cp311", "-r", str(pins), "-d", str(cache),
    ]  # fmt: skip
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise StackError(
            f"could not fetch the sandbox's static checkers ({pins.name}):\n{result.stderr[-1500:]}",
            "PyPI must be reachable once (later builds use the cache)",
        )
    # A pin `Name==1.0 --hash=...` is the wheel `name-1.0-<tags>.whl` (names normalised as wheels write them).
    pinned = {line.split(" ", 1)[0].lower().replace("-", "_") for line in _pinned(pins)}
    chosen = [w for w in sorted(cache.glob("*.whl")) if "==".join(w.name.split("-", 2)[:2]).lower() in pinned]
    if len(chosen) != len(pinned):
        raise StackError(f"expected {len(pinned)} static-checker wheels in {cache}, found {len(chosen)}")
    return chosen


def _pinned(pins: Path) -> list[str]:
    return [
        line.strip() for line in pins.read_text().splitlines() if line.strip() and not line.startswith("#")
    ]


def build_from(client: docker.DockerClient, context: Path, ref: ImageRef, base: ImageRef) -> None:
    """`docker build` of the folder `context` on `base` (its BASE_IMAGE argument), tagged `ref`."""
    try:
        # No bridge network exists, so build steps run without a network at all.
        client.images.build(
            path=str(context),
            tag=str(ref),
            buildargs={"BASE_IMAGE": str(base)},
            network_mode="none",
            rm=True,
            forcerm=True,
            labels={"dev.trialog.recipe": ref.tag},
        )
    except BuildError as exc:
        log = "".join(str(chunk.get("stream", chunk.get("error", ""))) for chunk in exc.build_log)
        raise StackError(f"docker build of {ref} failed: {exc.msg}\n{log[-1500:]}") from exc


def _rootfs_tarball(paths: Paths, ref: ImageRef) -> Path:
    """debootstrap the base recipe once and keep the tarball in the cache."""
    images = paths.cached("images")
    tarball = images / f"{ref.name}-{ref.tag}.tar"
    if tarball.exists():
        return tarball
    ensure_commands({"debootstrap": "debootstrap"})
    recipe = _recipe()
    mirror = debian_mirror()
    root = images / f"rootfs-{ref.tag}"
    shutil.rmtree(root, ignore_errors=True)
    say(f"   debootstrap --variant={recipe['variant']} {recipe['suite']} (mirror from apt sources)")
    argv = [
        "debootstrap", f"--variant={recipe['variant']}", f"--include={recipe['include']}",
        recipe["suite"], str(root), mirror,
    ]  # fmt: skip
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise StackError(
            f"debootstrap failed (exit {result.returncode}):\n{(result.stdout + result.stderr)[-1500:]}",
            f"see {root}/debootstrap/debootstrap.log; it needs root and the Debian mirror {mirror}",
        )
    _trim_rootfs(root)
    partial = tarball.with_suffix(".partial")
    subprocess.run(["tar", "--numeric-owner", "-C", str(root), "-cf", str(partial), "."], check=True)
    partial.rename(tarball)
    shutil.rmtree(root, ignore_errors=True)
    return tarball


def _trim_rootfs(root: Path) -> None:
    """Drop what a sandbox never needs: the apt package cache and lists (they only bloat every layer)."""
    for folder in (root / "var/cache/apt/archives", root / "var/lib/apt/lists"):
        for entry in folder.glob("*"):
            if entry.is_file():
                entry.unlink()


def missing(client: docker.DockerClient) -> list[str]:
    refs = [base_ref(), *(derived_ref(kind) for kind in DERIVED)]
    return [str(ref) for ref in refs if not _exists(client, ref)]
