from __future__ import annotations

import pytest

from ops.stack.kafka import KafkaPorts, server_properties


def _parse(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if line)


def test_every_listener_is_on_loopback_and_topics_are_never_auto_created() -> None:
    props = _parse(server_properties(KafkaPorts(broker=19092, controller=19093), "/data"))
    assert props["listeners"] == "PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093"
    assert props["advertised.listeners"] == "PLAINTEXT://127.0.0.1:19092"
    assert props["controller.quorum.voters"] == "1@127.0.0.1:19093"
    assert props["process.roles"] == "broker,controller"
    assert props["auto.create.topics.enable"] == "false"
    assert props["log.dirs"] == "/data"


def test_bootstrap_address() -> None:
    assert KafkaPorts(broker=1234).bootstrap == "127.0.0.1:1234"


def test_cluster_ids_never_start_with_a_dash(monkeypatch: pytest.MonkeyPatch) -> None:
    """`kafka-storage format -t -abc...` reads the id as an option: the broker never starts (1 in 64)."""
    import uuid

    from ops.stack.kafka import new_cluster_id

    # A UUID whose URL-safe base64 starts with "-" (0xf8 >> 2 == 62), then an ordinary one.
    drawn = iter([uuid.UUID(bytes=b"\xf8" + bytes(15)), uuid.UUID(bytes=bytes(16))])
    monkeypatch.setattr(uuid, "uuid4", lambda: next(drawn))
    assert new_cluster_id() == "AAAAAAAAAAAAAAAAAAAAAA"
