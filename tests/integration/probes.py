"""A worker's health endpoints (`streams.lifecycle`) as a test reads them."""

from __future__ import annotations

import json
import urllib.error
import urllib.request


def probe(port: int, path: str) -> tuple[int, dict[str, object]]:
    """(HTTP status, JSON body) of `GET http://127.0.0.1:PORT/PATH`; (0, {}) while nothing listens yet."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as failed:
        return failed.code, json.loads(failed.read())
    except OSError:
        return 0, {}
