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


def test_a_three_node_cluster_shares_one_quorum_and_replicates_kafkas_own_topics() -> None:
    ports = KafkaPorts(broker=19092, controller=19093, brokers=3)
    assert ports.nodes() == [(19092, 19093), (19094, 19095), (19096, 19097)]
    assert ports.bootstrap == "127.0.0.1:19092,127.0.0.1:19094,127.0.0.1:19096"
    third = _parse(server_properties(ports, "/data-3", node_id=3))
    assert third["node.id"] == "3"
    assert third["controller.quorum.voters"] == "1@127.0.0.1:19093,2@127.0.0.1:19095,3@127.0.0.1:19097"
    assert third["listeners"] == "PLAINTEXT://127.0.0.1:19096,CONTROLLER://127.0.0.1:19097"
    assert third["offsets.topic.replication.factor"] == "3"
    assert third["transaction.state.log.min.isr"] == "2"
    single = _parse(server_properties(KafkaPorts(broker=19092, controller=19093), "/data"))
    assert (single["offsets.topic.replication.factor"], single["transaction.state.log.min.isr"]) == ("1", "1")


def test_cluster_ports_must_not_overlap_and_the_size_is_bounded() -> None:
    from streams.errors import StackError

    with pytest.raises(StackError, match="overlap"):
        KafkaPorts(broker=19092, controller=19094, brokers=2)  # node 2's client port is node 1's controller
    with pytest.raises(StackError, match="1 to 5 brokers"):
        KafkaPorts(brokers=0)


def test_a_sasl_broker_accepts_only_authenticated_clients() -> None:
    from ops.stack.kafka import node_properties

    props = _parse(node_properties([(19092, 19093)], 1, "/data", {"broker": "b-secret", "trainer": "t"}))
    assert props["listeners"] == "SASL_PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093"
    assert props["inter.broker.listener.name"] == "SASL_PLAINTEXT"
    jaas = props["listener.name.sasl_plaintext.plain.sasl.jaas.config"]
    assert 'username="broker" password="b-secret"' in jaas and 'user_trainer="t"' in jaas


def test_a_node_behind_a_proxy_advertises_the_proxys_port_and_keeps_its_own_listeners() -> None:
    from ops.stack.kafka import node_properties

    nodes = [(19092, 19093), (19094, 19095), (19096, 19097)]
    proxied = _parse(node_properties(nodes, 2, "/data", advertised=29094))
    # Clients (and the other brokers: the inter-broker listener is the advertised one) come in by the proxy.
    assert proxied["advertised.listeners"] == "PLAINTEXT://127.0.0.1:29094"
    assert proxied["inter.broker.listener.name"] == "PLAINTEXT"
    # It still listens on its own ports, and the quorum talks directly.
    assert proxied["listeners"] == "PLAINTEXT://127.0.0.1:19094,CONTROLLER://127.0.0.1:19095"
    assert proxied["controller.quorum.voters"] == "1@127.0.0.1:19093,2@127.0.0.1:19095,3@127.0.0.1:19097"
    # Without one, it advertises its own client port, as before.
    assert _parse(node_properties(nodes, 2, "/data"))["advertised.listeners"] == "PLAINTEXT://127.0.0.1:19094"
    sasl = _parse(node_properties(nodes, 1, "/data", {"broker": "b"}, advertised=29092))
    assert sasl["advertised.listeners"] == "SASL_PLAINTEXT://127.0.0.1:29092"
