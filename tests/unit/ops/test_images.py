from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from ops.stack import images


@pytest.fixture
def recipe_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    copy = tmp_path / "images"
    shutil.copytree(images.IMAGES_DIR, copy)
    monkeypatch.setattr(images, "IMAGES_DIR", copy)
    monkeypatch.setattr(images, "BASE_RECIPE", copy / "base.txt")
    return copy


def test_tags_are_stable_for_an_unchanged_recipe(recipe_copy: Path) -> None:
    assert images.base_ref() == images.base_ref()
    assert images.sandbox_ref() == images.sandbox_ref()
    assert images.sandbox_ref().name == "trialog-sandbox"


def test_a_changed_base_recipe_gives_new_tags_for_every_image(recipe_copy: Path) -> None:
    before = (images.base_ref(), images.sandbox_ref(), images.kafka_ref())
    (recipe_copy / "base.txt").write_text((recipe_copy / "base.txt").read_text() + "# changed\n")
    after = (images.base_ref(), images.sandbox_ref(), images.kafka_ref())
    assert all(old.tag != new.tag for old, new in zip(before, after, strict=True))


def test_a_changed_dockerfile_changes_only_that_image(recipe_copy: Path) -> None:
    base, sandbox, kafka = images.base_ref(), images.sandbox_ref(), images.kafka_ref()
    dockerfile = recipe_copy / "sandbox" / "Dockerfile"
    dockerfile.write_text(dockerfile.read_text() + "ENV X=1\n")
    assert images.base_ref() == base
    assert images.kafka_ref() == kafka
    assert images.sandbox_ref() != sandbox
