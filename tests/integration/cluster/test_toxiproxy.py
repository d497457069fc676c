"""Network faults on loopback with Toxiproxy (built from its Go module by `trialog prepare`):

* a proxied TCP link gets the latency it is given, is cut off (its connection closed, new ones refused) and
  heals on the same port;
* a cluster of three brokers behind one proxy each (every node advertises its proxy, so clients and the
  brokers' replication go through them): latency on every link is in a record's round trip, and a broker
  cut off for seconds while records keyed across every partition are produced (acks=all, idempotent), then
  healed, leaves every acknowledged record in the log exactly once.
"""

from __future__ import annotations

import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from kafka import TopicPartition
from kafka.admin import NewTopic

from ops.paths import Paths
from ops.testing import KafkaCluster, ToxiproxyProcess
from streams.kafka import clients

LATENCY_MS = 200
CUT_S = 5.0
PARTITIONS = 6
# A loaded 2-core machine: each bound tells a working path from a broken one, it is not a timing claim.
WAIT_S = 90.0


class EchoServer:
    """Sends back what it is sent, one thread per connection, on a free loopback port."""

    def __init__(self) -> None:
        self._socket = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._socket.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                connection, _ = self._socket.accept()
            except OSError:
                return  # closed at the test's end
            threading.Thread(target=self._echo, args=(connection,), daemon=True).start()

    @staticmethod
    def _echo(connection: socket.socket) -> None:
        with connection:
            try:
                while data := connection.recv(4096):
                    connection.sendall(data)
            except OSError:
                return

    def close(self) -> None:
        self._socket.close()


def _round_trip_s(connection: socket.socket, payload: bytes = b"ping") -> float:
    started = time.monotonic()
    connection.sendall(payload)
    received = b""
    while len(received) < len(payload):
        chunk = connection.recv(4096)
        assert chunk, "the proxy closed the connection"
        received += chunk
    assert received == payload
    return time.monotonic() - started


def test_a_proxied_link_is_slowed_cut_off_and_healed(toxiproxy_process: ToxiproxyProcess) -> None:
    echo = EchoServer()
    client = toxiproxy_process.client
    assert client.version() == "v2.12.0"
    proxy = toxiproxy_process.proxy(f"echo-{uuid.uuid4().hex[:8]}", echo.port)
    try:
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as connection:
            _round_trip_s(connection)
            client.add_latency(proxy.name, LATENCY_MS)
            # Once upstream and once downstream.
            assert _round_trip_s(connection) >= 2 * LATENCY_MS / 1000
            client.remove_latency(proxy.name)
            assert client.toxics(proxy.name) == []
            client.add_latency(proxy.name, LATENCY_MS, streams=("downstream",))
            assert _round_trip_s(connection) >= LATENCY_MS / 1000
            client.cut(proxy.name)
            # The open connection is closed (EOF or a reset) and the port refuses new ones.
            try:
                connection.sendall(b"lost")
                assert connection.recv(4096) == b""
            except ConnectionError:
                pass
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection(("127.0.0.1", proxy.port), timeout=10).close()
        assert client.heal(proxy.name).port == proxy.port
        client.reset()  # every toxic gone, every proxy enabled
        with socket.create_connection(("127.0.0.1", proxy.port), timeout=10) as connection:
            _round_trip_s(connection)
            assert client.toxics(proxy.name) == []
    finally:
        client.delete_proxy(proxy.name)
        echo.close()
    assert proxy.name not in client.proxies()


@pytest.fixture(scope="module")
def proxied_cluster(
    docker_client: object, stack_paths: Paths, toxiproxy_process: ToxiproxyProcess
) -> Iterator[KafkaCluster]:
    made = KafkaCluster(stack_paths, 3, proxy=toxiproxy_process).start()
    try:
        yield made
    finally:
        made.stop()


def _topic(cluster: KafkaCluster, partitions: int) -> str:
    name = f"toxi-{uuid.uuid4().hex[:8]}"
    admin = clients.admin(cluster.bootstrap)
    try:
        admin.create_topics(
            [NewTopic(name, partitions, 3, topic_configs={"min.insync.replicas": "2"})], timeout_ms=60_000
        )
    finally:
        admin.close()
    return name


def _consumer(cluster: KafkaCluster, topic: str, partitions: int) -> Any:
    consumer = clients.consumer(cluster.bootstrap, enable_auto_commit=False, reconnect_backoff_max_ms=1000)
    consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
    return consumer


def test_the_cluster_is_reached_only_through_its_proxies(proxied_cluster: KafkaCluster) -> None:
    ports = {proxy.port for proxy in proxied_cluster.proxies}
    admin = clients.admin(proxied_cluster.bootstrap)
    try:
        brokers = admin.describe_cluster()["brokers"]
    finally:
        admin.close()
    assert {broker["port"] for broker in brokers} == ports, brokers
    assert not ports & {node.kafka_ports.broker for node in proxied_cluster.nodes}


def test_latency_on_every_link_is_in_a_records_round_trip(proxied_cluster: KafkaCluster) -> None:
    topic = _topic(proxied_cluster, 1)
    producer = clients.producer(proxied_cluster.bootstrap)
    consumer = _consumer(proxied_cluster, topic, 1)
    try:
        # Connections made and the consumer's position fixed before the latency, so that only it is timed.
        producer.send(topic, b"warm").get(timeout=WAIT_S)
        consumer.seek_to_end()
        consumer.position(TopicPartition(topic, 0))
        proxied_cluster.add_latency(LATENCY_MS)
        try:
            started = time.monotonic()
            producer.send(topic, b"timed").get(timeout=WAIT_S)
            acknowledged_s = time.monotonic() - started
            received: list[bytes] = []
            deadline = time.monotonic() + WAIT_S
            while b"timed" not in received and time.monotonic() < deadline:
                for records in consumer.poll(timeout_ms=500).values():
                    received.extend(record.value for record in records)
            round_trip_s = time.monotonic() - started
        finally:
            proxied_cluster.remove_latency()
        assert b"timed" in received, received
        # The produce request and its answer each cross one delayed link (both directions are delayed).
        assert acknowledged_s >= 2 * LATENCY_MS / 1000, acknowledged_s
        assert round_trip_s >= 2 * LATENCY_MS / 1000, round_trip_s
    finally:
        producer.close(timeout=10)
        consumer.close()


def test_a_broker_cut_off_and_healed_loses_and_duplicates_no_acknowledged_record(
    proxied_cluster: KafkaCluster,
) -> None:
    topic = _topic(proxied_cluster, PARTITIONS)
    victim = 1  # node id 2
    admin = clients.admin(proxied_cluster.bootstrap)
    try:
        (described,) = admin.describe_topics([topic])
    finally:
        admin.close()
    led = sorted(p["partition_index"] for p in described["partitions"] if p["leader_id"] == victim + 1)
    assert led, f"node {victim + 1} leads no partition of {topic}: {described}"
    # Short reconnect backoffs: the default grows to 30 s while the broker is away, and the test waits on it.
    producer = clients.producer(proxied_cluster.bootstrap, linger_ms=5, reconnect_backoff_max_ms=1000)
    acknowledged: dict[int, tuple[int, int]] = {}
    acknowledged_at: dict[int, float] = {}
    failed: dict[int, str] = {}
    during_cut: set[int] = set()

    def send(n: int) -> None:
        future = producer.send(topic, key=f"key-{n % 24}".encode(), value=str(n).encode())

        def done(meta: Any) -> None:
            acknowledged[n] = (meta.partition, meta.offset)
            acknowledged_at[n] = time.monotonic()

        future.add_callback(done)
        future.add_errback(lambda exc: failed.__setitem__(n, repr(exc)))

    seq, healed_at = 0, 0.0
    phases = (("before", 2.0), ("cut", CUT_S), ("healed", 2.0))
    try:
        for phase, seconds in phases:
            if phase == "cut":
                proxied_cluster.cut(victim)
            elif phase == "healed":
                proxied_cluster.heal(victim)
                healed_at = time.monotonic()
            until = time.monotonic() + seconds
            while time.monotonic() < until:
                send(seq)
                if phase == "cut":
                    during_cut.add(seq)
                seq += 1
                time.sleep(0.02)
        producer.flush(timeout=WAIT_S)
    finally:
        proxied_cluster.heal_all()
        producer.close(timeout=10)
    assert not failed, failed
    assert len(acknowledged) == seq, (len(acknowledged), seq)
    # The cut was real: what went to the cut-off leader's partitions meanwhile was acknowledged only after
    # the heal (the producer kept it and retried).
    held = [s for s in during_cut if acknowledged[s][0] in led]
    assert held, f"no record sent during the cut went to node {victim + 1}'s partitions {led}"
    assert min(acknowledged_at[s] for s in held) >= healed_at

    consumer = _consumer(proxied_cluster, topic, PARTITIONS)
    try:
        partitions = [TopicPartition(topic, p) for p in range(PARTITIONS)]
        consumer.seek_to_beginning()
        ends = consumer.end_offsets(partitions)
        read: list[tuple[int, int, int]] = []
        deadline = time.monotonic() + WAIT_S
        while any(consumer.position(tp) < ends[tp] for tp in partitions) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                read.extend((r.partition, r.offset, int(r.value)) for r in records)
    finally:
        consumer.close()
    counts = Counter(value for _, _, value in read)
    lost = sorted(set(acknowledged) - set(counts))
    duplicated = sorted(value for value, n in counts.items() if n > 1)
    assert not lost and not duplicated, {"lost": lost[:20], "duplicated": duplicated[:20], "read": len(read)}
    # Each record is where its acknowledgement said.
    at = {(partition, offset): value for partition, offset, value in read}
    assert all(at[where] == s for s, where in acknowledged.items())
