from __future__ import annotations

import pytest

from schemas.codec import Codec, default_codec


@pytest.fixture(scope="session")
def codec() -> Codec:
    return default_codec()
