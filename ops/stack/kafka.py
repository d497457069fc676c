"""Kafka 4.x in KRaft mode: jars resolved from Maven Central into the cache, one combined broker+controller
process bound to 127.0.0.1, topics created explicitly (auto-creation is off)."""

from __future__ import annotations

import shutil
import subprocess
import uuid
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


@dataclass(frozen=True)
class KafkaPorts:
    broker: int = 9092
    controller: int = 9093

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.broker}"


def server_properties(ports: KafkaPorts, data_dir: str, node_id: int = 1) -> str:
    """A single-node KRaft config; every listener on loopback, topics created only on purpose."""
    return "\n".join(
        [
            "process.roles=broker,controller",
            f"node.id={node_id}",
            f"controller.quorum.voters={node_id}@127.0.0.1:{ports.controller}",
            f"listeners=PLAINTEXT://127.0.0.1:{ports.broker},CONTROLLER://127.0.0.1:{ports.controller}",
            f"advertised.listeners=PLAINTEXT://127.0.0.1:{ports.broker}",
            "controller.listener.names=CONTROLLER",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "inter.broker.listener.name=PLAINTEXT",
            f"log.dirs={data_dir}",
            "auto.create.topics.enable=false",
            "num.partitions=1",
            "offsets.topic.replication.factor=1",
            "offsets.topic.num.partitions=8",
            "transaction.state.log.replication.factor=1",
            "transaction.state.log.min.isr=1",
            "share.coordinator.state.topic.replication.factor=1",
            "share.coordinator.state.topic.min.isr=1",
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


def start(paths: Paths, ports: KafkaPorts) -> None:
    home = paths.component("kafka")
    pid_file, log_file = home / "kafka.pid", home / "kafka.log"
    if process.running_pid(pid_file) is not None:
        return
    for port in (ports.broker, ports.controller):
        if process.port_open(port):
            raise StackError(
                f"port 127.0.0.1:{port} is already taken by another program",
                "stop it, or choose other ports with TRIALOG_KAFKA_PORT / TRIALOG_KAFKA_CONTROLLER_PORT",
            )
    classpath = f"{libs(paths)}/*"
    java = str(java_home() / "bin" / "java")
    data_dir = home / "data"
    config = home / "server.properties"
    config.write_text(server_properties(ports, str(data_dir)))
    if not (data_dir / "meta.properties").exists():
        cluster_id = _cluster_id(home)
        _check(
            [java, "-cp", classpath, "kafka.tools.StorageTool", "format", "-t", cluster_id,
             "-c", str(config), "--ignore-formatted"],
            "formatting Kafka's KRaft storage",
        )  # fmt: skip
    argv = [
        java, "-Xmx512m", "-Xms128m", "-XX:+UseG1GC", f"-Dlog4j2.configurationFile={LOG4J_CONFIG}",
        "-cp", classpath, "kafka.Kafka", str(config),
    ]  # fmt: skip
    process.start_detached(argv, pid_file=pid_file, log_file=log_file)
    if not process.wait_until(lambda: metadata_error(ports.bootstrap) is None, timeout_s=60):
        process.stop(pid_file)
        raise StackError(
            f"Kafka did not answer on {ports.bootstrap} within 60 s; last log lines:\n"
            f"{process.log_tail(log_file)}",
            f"see {log_file}",
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
    return process.stop(paths.component("kafka") / "kafka.pid", grace_s=30)


def metadata_error(bootstrap: str, timeout_s: float = 3.0) -> str | None:
    """None when a metadata request to `bootstrap` succeeds, else why not."""
    from kafka import KafkaAdminClient
    from kafka.errors import KafkaError

    host, _, port = bootstrap.rpartition(":")
    # The client retries a closed port for tens of seconds; a status check should answer at once.
    if not process.port_open(int(port), host):
        return f"nothing listens on {bootstrap}"
    try:
        admin = KafkaAdminClient(
            bootstrap_servers=bootstrap,
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
    return Health(True, f"{name} answers metadata requests (KRaft, single node)", ports.bootstrap)
