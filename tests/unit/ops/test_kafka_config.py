from __future__ import annotations

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
