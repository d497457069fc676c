from __future__ import annotations

from pathlib import Path

import pytest

from .helpers import humaneval_wheel_path


@pytest.fixture(scope="session")
def humaneval_wheel() -> Path:
    return humaneval_wheel_path()
