"""Local images, never pulled: a debootstrapped Debian base, then `docker build` layers on top of it.

Every tag is a content hash of its recipe (and of its base's tag), so a changed recipe gives a new tag and
an unchanged one is found and reused. The base root filesystem tarball is cached, so a fresh Docker engine
only pays for `docker import` and the small layers.
"""

from __future__ import annotations

import hashlib
import shutil
import subprocess
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
            _build(client, kind, ref, base)
        built.append(ref)
    return built


def _build(client: docker.DockerClient, kind: str, ref: ImageRef, base: ImageRef) -> None:
    build_from(client, IMAGES_DIR / kind, ref, base)


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
