"""Kafka 4.x in KRaft mode: jars resolved from Maven Central into the cache, one combined broker+controller
process per node bound to 127.0.0.1 (one node by default, a quorum of three with `trialog up --brokers 3`),
topics created explicitly (auto-creation is off)."""

from __future__ import annotations

import shutil
import subprocess
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from ops import process
from ops.console import say
from ops.paths import REPO_ROOT, Paths
from ops.stack.health import Health
from ops.stack.java import java_home
from streams.errors import StackError

# Newest first: the first that resolves with its dependencies is used and remembered in the cache.
KAFKA_VERSIONS = ("4.5.0", "4.4.1", "4.4.0", "4.3.1", "4.3.0", "4.2.0", "4.1.1", "4.0.0")
POM = REPO_ROOT / "ops" / "kafka" / "pom.xml"
LOG4J_CONFIG = REPO_ROOT / "ops" / "kafka" / "log4j2.properties"


MAX_BROKERS = 5


@dataclass(frozen=True)
class KafkaPorts:
    """The first node's client and controller ports; node i (from 0) of a cluster of `brokers` listens on
    `broker + 2i` and `controller + 2i` (9092/9093, 9094/9095, 9096/9097 by default)."""

    broker: int = 9092
    controller: int = 9093
    brokers: int = 1

    def __post_init__(self) -> None:
        if not 1 <= self.brokers <= MAX_BROKERS:
            raise StackError(f"a local Kafka cluster has 1 to {MAX_BROKERS} brokers, not {self.brokers}")
        ports = [port for node in self.nodes() for port in node]
        if len(set(ports)) != len(ports):
            raise StackError(
                f"the broker and controller ports of {self.brokers} nodes overlap: {ports}",
                "choose ports at least 2 x brokers apart (TRIALOG_KAFKA_PORT, TRIALOG_KAFKA_CONTROLLER_PORT)",
            )

    def nodes(self) -> list[tuple[int, int]]:
        """(client port, controller port) of each node."""
        return [(self.broker + 2 * i, self.controller + 2 * i) for i in range(self.brokers)]

    @property
    def bootstrap(self) -> str:
        return ",".join(f"127.0.0.1:{broker}" for broker, _ in self.nodes())


def server_properties(ports: KafkaPorts, data_dir: str, node_id: int = 1) -> str:
    """The KRaft config of node `node_id` (from 1) of the cluster `ports` describes."""
    return node_properties(ports.nodes(), node_id, data_dir)


def node_properties(
    nodes: list[tuple[int, int]],
    node_id: int,
    data_dir: str,
    sasl_plain_users: Mapping[str, str] | None = None,
    advertised: int | None = None,
) -> str:
    """Node `node_id` (from 1) of a cluster of combined broker+controller nodes with these (client,
    controller) ports; every listener on loopback, topics created only on purpose. Kafka's own topics
    (consumer offsets, transactions) get three replicas and two in sync on a cluster of three or more, as
    the run's topics do (`streams.kafka.topics.Durability`). With `sasl_plain_users` (name -> password)
    clients must authenticate with SASL/PLAIN (the first user is the brokers' own), as a secured cluster
    asks of trialog's workers (`streams.kafka.clients.Security`).

    `advertised` is the loopback port clients are told to reach the node at, when that is not its client
    port: a proxy in front of it (the fault tests' Toxiproxy), so that every connection after the bootstrap
    goes through the proxy too. The other brokers replicate through it as well (the inter-broker listener
    is the advertised one); the controller listener stays direct."""
    broker, controller = nodes[node_id - 1]
    voters = ",".join(f"{i}@127.0.0.1:{c}" for i, (_, c) in enumerate(nodes, start=1))
    replication = min(3, len(nodes))
    min_isr = max(1, min(2, replication - 1))
    listener = "SASL_PLAINTEXT" if sasl_plain_users else "PLAINTEXT"
    sasl = []
    if sasl_plain_users:
        (admin, password), *_ = sasl_plain_users.items()
        users = " ".join(f'user_{name}="{secret}"' for name, secret in sasl_plain_users.items())
        sasl = [
            "sasl.enabled.mechanisms=PLAIN",
            "sasl.mechanism.inter.broker.protocol=PLAIN",
            "listener.name.sasl_plaintext.plain.sasl.jaas.config="
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="{admin}" password="{password}" {users};',
        ]
    return "\n".join(
        [
            "process.roles=broker,controller",
            f"node.id={node_id}",
            f"controller.quorum.voters={voters}",
            f"listeners={listener}://127.0.0.1:{broker},CONTROLLER://127.0.0.1:{controller}",
            f"advertised.listeners={listener}://127.0.0.1:{broker if advertised is None else advertised}",
            "controller.listener.names=CONTROLLER",
            f"listener.security.protocol.map={listener}:{listener},CONTROLLER:PLAINTEXT",
            f"inter.broker.listener.name={listener}",
            *sasl,
            f"log.dirs={data_dir}",
            "auto.create.topics.enable=false",
            "num.partitions=1",
            f"default.replication.factor={replication}",
            f"offsets.topic.replication.factor={replication}",
            "offsets.topic.num.partitions=8",
            f"transaction.state.log.replication.factor={replication}",
            f"transaction.state.log.min.isr={min_isr}",
            f"share.coordinator.state.topic.replication.factor={replication}",
            f"share.coordinator.state.topic.min.isr={min_isr}",
            "group.initial.rebalance.delay.ms=0",
            "log.cleaner.backoff.ms=5000",
            "",
        ]
    )


def libs(paths: Paths) -> Path:
    """The broker's class path folder, resolved once per Kafka version and cached."""
    root = paths.cached("kafka")
    chosen = root / "VERSION"
    if chosen.exists():
        done = root / chosen.read_text().strip() / "libs"
        if (done / ".complete").exists():
            return done
    if shutil.which("mvn") is None:
        raise StackError("Maven (`mvn`) is not installed", "install it: apt-get install -y maven")
    failures = []
    for version in KAFKA_VERSIONS:
        target = root / version / "libs"
        if _resolve(paths, version, target):
            chosen.write_text(version)
            say(f"   Kafka {version} resolved ({len(list(target.glob('*.jar')))} jars)")
            return target
        failures.append(version)
    raise StackError(
        f"no Kafka version in {', '.join(failures)} resolved from Maven Central",
        "check that Maven Central is reachable (mvn -X shows the repository errors)",
    )


def _resolve(paths: Paths, version: str, target: Path) -> bool:
    shutil.rmtree(target, ignore_errors=True)
    argv = [
        "mvn", "-q", "-B", "-f", str(POM),
        f"-Dmaven.repo.local={paths.cached('m2')}",
        f"-Dkafka.version={version}",
        "dependency:copy-dependencies",
        f"-DoutputDirectory={target}",
        "-DincludeScope=runtime",
    ]  # fmt: skip
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0 or not (target / f"kafka_2.13-{version}.jar").exists():
        return False
    (target / ".complete").write_text(version)
    return True


def version(paths: Paths) -> str:
    return (paths.cached("kafka") / "VERSION").read_text().strip()


def _node_files(home: Path, node_id: int) -> tuple[Path, Path, Path, Path]:
    """pid, log, config and data folder of node `node_id`; node 1 keeps the single-node stack's names."""
    suffix = "" if node_id == 1 else f"-{node_id}"
    return (
        home / f"kafka{suffix}.pid",
        home / f"kafka{suffix}.log",
        home / f"server{suffix}.properties",
        home / f"data{suffix}",
    )


def start(paths: Paths, ports: KafkaPorts) -> None:
    home = paths.component("kafka")
    _check_formatted_for(home, ports.brokers)
    nodes = list(range(1, ports.brokers + 1))
    if all(process.running_pid(_node_files(home, n)[0]) is not None for n in nodes):
        return
    for node in nodes:
        if process.running_pid(_node_files(home, node)[0]) is not None:
            continue
        for port in ports.nodes()[node - 1]:
            if process.port_open(port):
                raise StackError(
                    f"port 127.0.0.1:{port} is already taken by another program",
                    "stop it, or choose other ports with TRIALOG_KAFKA_PORT / TRIALOG_KAFKA_CONTROLLER_PORT",
                )
    classpath = f"{libs(paths)}/*"
    java = str(java_home() / "bin" / "java")
    cluster_id = _cluster_id(home)
    for node in nodes:
        pid_file, log_file, config, data_dir = _node_files(home, node)
        if process.running_pid(pid_file) is not None:
            continue
        config.write_text(server_properties(ports, str(data_dir), node))
        if not (data_dir / "meta.properties").exists():
            _check(
                [java, "-cp", classpath, "kafka.tools.StorageTool", "format", "-t", cluster_id,
                 "-c", str(config), "--ignore-formatted"],
                f"formatting node {node}'s KRaft storage",
            )  # fmt: skip
        argv = [
            java, "-Xmx512m", "-Xms128m", "-XX:+UseG1GC", f"-Dlog4j2.configurationFile={LOG4J_CONFIG}",
            "-cp", classpath, "kafka.Kafka", str(config),
        ]  # fmt: skip
        process.start_detached(argv, pid_file=pid_file, log_file=log_file)
    (home / "brokers").write_text(str(ports.brokers))
    # A quorum of three elects its leader only once a majority runs: all nodes are started before waiting.
    if not process.wait_until(lambda: brokers_answering(ports.bootstrap) >= ports.brokers, timeout_s=120):
        for node in nodes:
            process.stop(_node_files(home, node)[0])
        tails = "\n".join(process.log_tail(_node_files(home, n)[1]) for n in nodes)
        raise StackError(
            f"Kafka did not answer with {ports.brokers} broker(s) on {ports.bootstrap} within 120 s; "
            f"last log lines:\n{tails}",
            f"see {home}/kafka*.log",
        )


def _check_formatted_for(home: Path, brokers: int) -> None:
    """A stack's storage is formatted for one quorum; starting it as another would never elect a leader."""
    recorded = home / "brokers"
    formatted = (home / "data" / "meta.properties").exists()
    if formatted and recorded.exists() and int(recorded.read_text()) != brokers:
        raise StackError(
            f"this stack's Kafka was made with {recorded.read_text().strip()} broker(s), not {brokers}",
            f"keep --brokers {recorded.read_text().strip()}, or start afresh: trialog down && rm -r {home}",
        )
    if formatted and not recorded.exists() and brokers != 1:
        raise StackError(
            f"this stack's Kafka was made with 1 broker, not {brokers}",
            f"keep one broker, or start afresh: trialog down && rm -r {home}",
        )


def new_cluster_id() -> str:
    """A KRaft cluster id: a random UUID in URL-safe base64 that never starts with "-". One that did (1 in
    64) would be read by `kafka-storage format -t ID` as an option, and the broker would never start (seen
    as a rare CI failure). Kafka's own `Uuid.randomUuid` avoids it the same way."""
    import base64

    while True:
        raw = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not raw.startswith("-"):
            return raw


def _cluster_id(home: Path) -> str:
    """KRaft wants a base64 UUID; one per stack home, kept so that a restart finds the same cluster."""
    path = home / "cluster.id"
    if not path.exists() or path.read_text().strip().startswith("-"):
        path.write_text(new_cluster_id())
    return path.read_text().strip()


def _check(argv: list[str], what: str) -> None:
    result = subprocess.run(argv, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise StackError(f"{what} failed: {(result.stderr or result.stdout).strip()[-800:]}")


def stop(paths: Paths) -> bool:
    """Stop every node of the stack's Kafka; True if one was running."""
    home = paths.component("kafka")
    stopped = False
    for pid_file in sorted(home.glob("kafka*.pid")):
        stopped = process.stop(pid_file, grace_s=30) or stopped
    return stopped


def brokers_answering(bootstrap: str, timeout_s: float = 3.0) -> int:
    """How many brokers the cluster at `bootstrap` lists as alive (0 when it does not answer)."""
    from kafka.errors import KafkaError

    from streams.kafka import clients

    if metadata_error(bootstrap, timeout_s) is not None:
        return 0
    try:
        admin = clients.admin(bootstrap, request_timeout_ms=int(timeout_s * 1000), client_id="trialog-health")
    except (KafkaError, OSError, ValueError):
        return 0
    try:
        return len(admin.describe_cluster()["brokers"])
    except (KafkaError, OSError):
        return 0
    finally:
        admin.close()


def metadata_error(bootstrap: str, timeout_s: float = 3.0) -> str | None:
    """None when a metadata request to `bootstrap` succeeds, else why not."""
    from kafka.errors import KafkaError

    from streams.kafka import clients

    # The client retries a closed port for tens of seconds; a status check should answer at once.
    listening = []
    for server in bootstrap.split(","):
        host, _, port = server.rpartition(":")
        if process.port_open(int(port), host):
            listening.append(server)
    if not listening:
        return f"nothing listens on {bootstrap}"
    bootstrap = ",".join(listening)
    try:
        admin = clients.admin(
            bootstrap,
            request_timeout_ms=int(timeout_s * 1000),
            client_id="trialog-health",
        )
    except (KafkaError, OSError, ValueError) as exc:
        return f"{type(exc).__name__}: {exc}"
    try:
        admin.list_topics()
    except (KafkaError, OSError) as exc:
        return f"{type(exc).__name__}: {exc}"
    finally:
        admin.close()
    return None


def health(paths: Paths, ports: KafkaPorts) -> Health:
    error = metadata_error(ports.bootstrap)
    if error is not None:
        return Health(False, f"metadata request failed: {error}", ports.bootstrap)
    recorded = paths.cache / "kafka" / "VERSION"
    name = f"Kafka {recorded.read_text().strip()}" if recorded.exists() else "Kafka"
    if ports.brokers == 1:
        return Health(True, f"{name} answers metadata requests (KRaft, single node)", ports.bootstrap)
    alive = brokers_answering(ports.bootstrap)
    return Health(
        alive == ports.brokers,
        f"{name}: {alive} of {ports.brokers} brokers alive (KRaft quorum)",
        ports.bootstrap,
    )
