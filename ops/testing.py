"""Building blocks for integration tests against the real components (used by tests/conftest.py).

`KafkaContainer` runs Kafka in a container on a free loopback port with host networking: the image is built
locally (ops/images/kafka), the broker jars come from the cache and the host's Java runtime is mounted
read-only, so nothing is pulled. `JaegerProcess` runs the cached Jaeger binary on free loopback ports,
`SeaweedProcess` the cached SeaweedFS binary as an S3 server with one bucket, and `ToxiproxyProcess` the
cached Toxiproxy server, which `KafkaCluster(..., proxy=...)` puts in front of every broker to cut one off
or slow them all down.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import threading
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType

from ops import process
from ops.paths import Paths
from ops.stack import docker_engine, images, jaeger, kafka, seaweedfs, toxiproxy
from ops.stack.java import host_paths_of_runtime, java_home
from streams.errors import StackError

# testcontainers' reaper ("Ryuk") is pulled from a public registry, which this machine cannot reach; our
# fixtures remove their containers themselves and label them so that strays can be found.
os.environ.setdefault("TESTCONTAINERS_RYUK_DISABLED", "true")

from testcontainers.core.container import DockerContainer

# Every container a test starts carries `owned_labels(role)`: its role, and the test process that owns it.
# A test session removes leftovers at its start and end, but only its own and those whose owner is gone:
# sessions sharing one engine (several checkouts) must never remove each other's running containers (a
# broker or a sandbox vanishing under a test fails it for no reason of its own).
CONTAINER_LABEL = "dev.trialog.tests"
OWNER_LABEL = "dev.trialog.tests.owner"
# Before owners were recorded: containers with this label are removed only once they no longer run.
LEGACY_LABEL = "dev.trialog.test"


def owned_labels(role: str) -> dict[str, str]:
    return {CONTAINER_LABEL: role, OWNER_LABEL: str(os.getpid())}


def owner_alive(labels: dict[str, str]) -> bool:
    """Whether the test process named by a container's `OWNER_LABEL` still runs (False without one)."""
    owner = labels.get(OWNER_LABEL, "")
    if not owner.isdigit():
        return False
    try:
        os.kill(int(owner), 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def leftover(labels: dict[str, str]) -> bool:
    """A test container to remove: this process's own, or one whose owner is gone."""
    return labels.get(OWNER_LABEL) == str(os.getpid()) or not owner_alive(labels)


def use_stack_engine(paths: Paths) -> docker_engine.Engine:
    """Point DOCKER_HOST at the stack's engine (testcontainers and the docker SDK read it)."""
    engine = docker_engine.current(paths)
    if engine is None:
        raise StackError("no Docker engine answers", "run `trialog prepare` (make test does) first")
    os.environ["DOCKER_HOST"] = engine.url
    return engine


class KafkaContainer(DockerContainer):
    """A single-node KRaft Kafka in a locally built container, on a free 127.0.0.1 port; or, given `nodes`
    (every node's client and controller ports) and `node_id`, one node of a cluster (`KafkaCluster`)."""

    def __init__(
        self,
        paths: Paths,
        ports: kafka.KafkaPorts | None = None,
        *,
        nodes: list[tuple[int, int]] | None = None,
        node_id: int = 1,
        cluster_id: str | None = None,
        sasl_plain_users: Mapping[str, str] | None = None,
        advertised: int | None = None,
    ) -> None:
        """`advertised`: the loopback port clients are told to use for this node (a proxy in front of it);
        `bootstrap` stays the node's own port."""
        super().__init__(str(images.kafka_ref()))
        if nodes is None:
            self.kafka_ports = ports or kafka.KafkaPorts(*process.free_ports(2))
            nodes = self.kafka_ports.nodes()
        else:
            self.kafka_ports = kafka.KafkaPorts(*nodes[node_id - 1])
        self._config_dir = paths.component("test-kafka") / uuid.uuid4().hex[:8]
        self._config_dir.mkdir(parents=True)
        (self._config_dir / "server.properties").write_text(
            kafka.node_properties(nodes, node_id, "@DATA_DIR@", sasl_plain_users, advertised)
        )
        (self._config_dir / "log4j2.properties").write_text(kafka.LOG4J_CONFIG.read_text())
        runtime = java_home()
        self.with_kwargs(network_mode="host", labels=owned_labels("kafka"))
        self.with_env("JAVA_HOME", str(runtime))
        self.with_env("KAFKA_CLUSTER_ID", cluster_id or kafka.new_cluster_id())
        self.with_volume_mapping(str(kafka.libs(paths)), "/opt/kafka/libs", "ro")
        self.with_volume_mapping(str(self._config_dir), "/etc/kafka", "ro")
        for host_path in host_paths_of_runtime(runtime):
            self.with_volume_mapping(str(host_path), str(host_path), "ro")

    @property
    def bootstrap(self) -> str:
        return self.kafka_ports.bootstrap

    def launch(self) -> KafkaContainer:
        """Start the container without waiting for it to answer (a cluster's node answers only once a
        majority of the quorum runs)."""
        super().start()
        return self

    def start(self) -> KafkaContainer:
        super().start()
        # Usually ~10 s; a loaded 2-core machine has been seen to need more than 90 s.
        if not process.wait_until(lambda: kafka.metadata_error(self.bootstrap) is None, timeout_s=300):
            logs = self.get_wrapped_container().logs(tail=30).decode(errors="replace")
            self.stop()
            raise StackError(f"Kafka in a container did not answer on {self.bootstrap}:\n{logs}")
        return self

    def kill(self) -> None:
        """SIGKILL the broker: a crash, not a shutdown."""
        self.get_wrapped_container().kill()

    def halt(self, timeout_s: int = 60) -> None:
        """Stop the broker (`docker stop`: SIGTERM, then SIGKILL after `timeout_s`); the container, its data
        and its ports are kept for `resume`."""
        self.get_wrapped_container().stop(timeout=timeout_s)

    def resume(self, timeout_s: float = 180) -> None:
        """Start the stopped broker again on the same ports and data; returns once it answers."""
        container = self.get_wrapped_container()
        container.start()
        if not process.wait_until(lambda: kafka.metadata_error(self.bootstrap) is None, timeout_s=timeout_s):
            logs = container.logs(tail=30).decode(errors="replace")
            raise StackError(f"Kafka restarted in a container did not answer on {self.bootstrap}:\n{logs}")

    def stop(self, force: bool = True, delete_volume: bool = True) -> None:
        super().stop(force=force, delete_volume=delete_volume)
        shutil.rmtree(self._config_dir, ignore_errors=True)


class KafkaCluster:
    """`size` KRaft nodes (combined broker+controller), each in its own container on free loopback ports:
    the cluster `trialog up --brokers 3` runs, for tests that stop and cut off brokers.

    With `proxy` (a started `ToxiproxyProcess`), one Toxiproxy proxy stands in front of each node's client
    listener and the node advertises the proxy's port: `bootstrap` lists the proxies, and every client
    connection after it, and the brokers' replication between themselves, goes through them; the KRaft
    controller listener stays direct. `cut(i)` then partitions node `i`'s data listener from everyone (its
    connections are closed, new ones refused; it stays in the quorum), `heal(i)` ends that, and
    `add_latency` slows every link."""

    def __init__(self, paths: Paths, size: int = 3, proxy: ToxiproxyProcess | None = None) -> None:
        free = process.free_ports(2 * size)
        nodes = [(free[2 * i], free[2 * i + 1]) for i in range(size)]
        cluster_id = kafka.new_cluster_id()
        self.toxiproxy = proxy
        self.proxies: list[toxiproxy.Proxy] = []
        if proxy is not None:
            self.proxies = _proxies_in_front_of(proxy.client, [client for client, _ in nodes], nodes)
        advertised: list[int | None] = [p.port for p in self.proxies] or [None] * size
        self.nodes = [
            KafkaContainer(paths, nodes=nodes, node_id=i, cluster_id=cluster_id, advertised=advertised[i - 1])
            for i in range(1, size + 1)
        ]

    @property
    def bootstrap(self) -> str:
        """The proxies' addresses when the cluster has them, else the nodes' own."""
        if self.proxies:
            return ",".join(toxiproxy.address(p.port) for p in self.proxies)
        return ",".join(node.bootstrap for node in self.nodes)

    def _client(self) -> toxiproxy.ToxiproxyClient:
        if self.toxiproxy is None:
            raise StackError(
                "this Kafka cluster has no proxies in front of its nodes",
                "make it with KafkaCluster(paths, size, proxy=ToxiproxyProcess(paths) entered)",
            )
        return self.toxiproxy.client

    def cut(self, i: int) -> None:
        """Cut node `i` (from 0, as in `nodes`) off: its proxy closes every connection through it and
        refuses new ones, clients' and the other brokers' alike."""
        self._client().cut(self.proxies[i].name)

    def heal(self, i: int) -> None:
        """Let node `i` be reached again (on the same address)."""
        self._client().heal(self.proxies[i].name)

    def add_latency(
        self, latency_ms: int, jitter_ms: int = 0, streams: tuple[toxiproxy.Stream, ...] = toxiproxy.BOTH
    ) -> None:
        """Delay every chunk to and from every node by `latency_ms` +/- `jitter_ms` (both directions by
        default: a request and its answer then take at least 2 x `latency_ms` over one link)."""
        client = self._client()
        for proxy in self.proxies:
            client.add_latency(proxy.name, latency_ms, jitter_ms, streams)

    def remove_latency(self) -> None:
        client = self._client()
        for proxy in self.proxies:
            client.remove_latency(proxy.name)

    def heal_all(self) -> None:
        """Every node reachable and no toxic left: this cluster's proxies only (`reset` would clear every
        proxy of the shared server)."""
        client = self._client()
        for proxy in self.proxies:
            client.heal(proxy.name)
            for toxic in client.toxics(proxy.name):
                client.remove_toxic(proxy.name, toxic.name)

    def start(self, timeout_s: float = 300) -> KafkaCluster:
        for node in self.nodes:
            node.launch()
        if not process.wait_until(lambda: self.alive() == len(self.nodes), timeout_s=timeout_s):
            logs = "\n".join(
                n.get_wrapped_container().logs(tail=15).decode(errors="replace") for n in self.nodes
            )
            self.stop()
            raise StackError(
                f"a Kafka cluster of {len(self.nodes)} did not form on {self.bootstrap}:\n{logs}"
            )
        return self

    def alive(self) -> int:
        """Brokers the cluster lists as alive."""
        return kafka.brokers_answering(self.bootstrap)

    def stop(self) -> None:
        for node in self.nodes:
            with contextlib.suppress(Exception):
                node.stop()
        if self.toxiproxy is not None:
            for proxy in self.proxies:
                with contextlib.suppress(toxiproxy.ToxiproxyError):
                    self.toxiproxy.client.delete_proxy(proxy.name)


def _proxies_in_front_of(
    client: toxiproxy.ToxiproxyClient, upstreams: list[int], nodes: list[tuple[int, int]]
) -> list[toxiproxy.Proxy]:
    """One proxy per upstream port, each on a loopback port the server picks (no race for a free port)."""
    taken = {port for node in nodes for port in node}
    tag = uuid.uuid4().hex[:8]
    made: list[toxiproxy.Proxy] = []
    for i, upstream in enumerate(upstreams, start=1):
        name = f"kafka-{tag}-{i}"
        made.append(client.create_proxy(name, 0, upstream))
        # The nodes' ports were only drawn, not yet bound: the server may have been given one of them.
        while made[-1].port in taken:
            client.delete_proxy(name)
            made[-1] = client.create_proxy(name, 0, upstream)
        taken.add(made[-1].port)
    return made


@dataclass
class JaegerProcess:
    """The cached Jaeger binary on free loopback ports, stopped on exit."""

    paths: Paths
    ports: jaeger.JaegerPorts = field(default_factory=lambda: jaeger.JaegerPorts(*process.free_ports(6)))
    home: Path = field(init=False)

    def __enter__(self) -> JaegerProcess:
        self.home = self.paths.component("test-jaeger") / uuid.uuid4().hex[:8]
        self.home.mkdir(parents=True)
        isolated = Paths(home=self.home, cache=self.paths.cache)
        jaeger.start(isolated, self.ports)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        jaeger.stop(Paths(home=self.home, cache=self.paths.cache))


@dataclass
class SeaweedProcess:
    """The cached SeaweedFS binary as an S3 server on free loopback ports with one empty `bucket`, its data
    under `$TRIALOG_HOME/test-seaweedfs/<id>`: stopped and deleted on exit."""

    paths: Paths
    bucket: str = "trialog-test"
    server: seaweedfs.SeaweedServer = field(init=False)

    def __enter__(self) -> seaweedfs.SeaweedServer:
        home = self.paths.component("test-seaweedfs") / uuid.uuid4().hex[:8]
        try:
            self.server = seaweedfs.start_on_free_ports(self.paths, home, self.bucket)
        except StackError:
            shutil.rmtree(home, ignore_errors=True)
            raise
        return self.server

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        seaweedfs.remove(self.server)


@dataclass
class ToxiproxyProcess:
    """The cached Toxiproxy server with its API on a free loopback port, its log under
    `$TRIALOG_HOME/test-toxiproxy/<id>`: stopped and deleted on exit. Proxies made through `client` listen
    on 127.0.0.1 (port 0: one the server picks)."""

    paths: Paths
    port: int = field(default_factory=process.free_port)
    server: toxiproxy.ToxiproxyServer = field(init=False)

    @property
    def url(self) -> str:
        return self.server.url

    @property
    def client(self) -> toxiproxy.ToxiproxyClient:
        return self.server.client()

    def proxy(self, name: str, upstream: int | str, listen: int | str = 0) -> toxiproxy.Proxy:
        """A proxy to `upstream` (a bare port is on 127.0.0.1); its `port` is where to connect."""
        return self.client.create_proxy(name, listen, upstream)

    def __enter__(self) -> ToxiproxyProcess:
        home = self.paths.component("test-toxiproxy") / uuid.uuid4().hex[:8]
        try:
            self.server = toxiproxy.start(self.paths, home, self.port)
        except StackError:
            shutil.rmtree(home, ignore_errors=True)
            raise
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.server.stop()
        shutil.rmtree(self.server.home, ignore_errors=True)


class LoopbackListener:
    """A TCP listener on 127.0.0.1 that records who connected: for tests that prove a sandbox cannot."""

    def __init__(self) -> None:
        self._socket = socket.socket()
        self._socket.bind(("127.0.0.1", 0))
        self._socket.listen()
        self.port: int = self._socket.getsockname()[1]
        self.accepted: list[tuple[str, int]] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def _accept(self) -> None:
        # accept() fails once the socket is closed at exit: that is the end of the test, not an error.
        with contextlib.suppress(OSError):
            while True:
                connection, address = self._socket.accept()
                connection.close()
                self.accepted.append(address)

    def __enter__(self) -> LoopbackListener:
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        with contextlib.suppress(OSError):
            self._socket.shutdown(socket.SHUT_RDWR)
        self._socket.close()
        self._thread.join(timeout=5)
