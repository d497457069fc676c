"""`trialog prepare | up | down | status`: the local single-node stack, one timed step per component."""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from typing import Any

from ops.console import say, step
from ops.paths import Paths
from ops.stack import compose_check, docker_engine, images, jaeger, kafka, seaweedfs, toxiproxy
from ops.stack.health import Health
from streams.kafka.topics import ensure_topics


@dataclass(frozen=True)
class StackConfig:
    paths: Paths
    kafka: kafka.KafkaPorts
    jaeger: jaeger.JaegerPorts

    @classmethod
    def load(cls, paths: Paths | None = None) -> StackConfig:
        """The ports of a running stack (recorded by `up`), else the defaults overridden by environment."""
        paths = paths or Paths.from_env()
        recorded = paths.home / "stack.json"
        if recorded.exists():
            data = json.loads(recorded.read_text())
            return cls(paths, kafka.KafkaPorts(**data["kafka"]), jaeger.JaegerPorts(**data["jaeger"]))
        env = os.environ
        return cls(
            paths,
            kafka.KafkaPorts(
                broker=int(env.get("TRIALOG_KAFKA_PORT", 9092)),
                controller=int(env.get("TRIALOG_KAFKA_CONTROLLER_PORT", 9093)),
                brokers=int(env.get("TRIALOG_KAFKA_BROKERS", 1)),
            ),
            jaeger.JaegerPorts(
                otlp_grpc=int(env.get("TRIALOG_JAEGER_OTLP_GRPC_PORT", 4317)),
                otlp_http=int(env.get("TRIALOG_JAEGER_OTLP_HTTP_PORT", 4318)),
                query=int(env.get("TRIALOG_JAEGER_QUERY_PORT", 16686)),
                query_grpc=int(env.get("TRIALOG_JAEGER_QUERY_GRPC_PORT", 16685)),
                health=int(env.get("TRIALOG_JAEGER_HEALTH_PORT", 13133)),
                metrics=int(env.get("TRIALOG_JAEGER_METRICS_PORT", 8888)),
            ),
        )

    def record(self) -> None:
        self.paths.home.mkdir(parents=True, exist_ok=True)
        data = {"kafka": asdict(self.kafka), "jaeger": asdict(self.jaeger)}
        (self.paths.home / "stack.json").write_text(json.dumps(data, indent=2))


def prepare(config: StackConfig) -> None:
    """Install and build everything the stack and the tests need; starts only the Docker engine."""
    paths = config.paths
    with step("Docker engine (docker.io, no bridge, no iptables)"):
        engine = docker_engine.ensure(paths)
        say(f"   engine at {engine.url}")
    with step("sandbox images (debootstrap base + docker build)"):
        refs = images.ensure_all(engine.client(timeout_s=600), paths)
        say(f"   {', '.join(str(ref) for ref in refs)}")
    with step("Kafka jars (Maven Central once, then cached)"):
        kafka.libs(paths)
        say(f"   Kafka {kafka.version(paths)}")
    with step("Jaeger binary (go build once, then cached)"):
        say(f"   {jaeger.binary(paths)}")
    # Not part of `up` (the stack's object store is a folder): the server the S3 store's tests start.
    with step("SeaweedFS binary, the tests' S3 server (go build once: minutes; then cached)"):
        say(f"   {seaweedfs.binary(paths)}")
    # Not part of `up` either: the proxy the fault tests put in front of brokers to cut them off or slow them.
    with step("Toxiproxy binary, the fault tests' network proxy (go build once, then cached)"):
        say(f"   {toxiproxy.binary(paths)}")
    # The tests' check of ops/deploy/compose.yaml, with the reader `docker compose` uses.
    with step("compose-check, the tests' compose file validator (go build once, then cached)"):
        say(f"   {compose_check.binary(paths)}")


def up(config: StackConfig) -> None:
    prepare(config)
    config.record()
    brokers = "broker" if config.kafka.brokers == 1 else f"cluster of {config.kafka.brokers} brokers"
    with step(f"Kafka {brokers} on {config.kafka.bootstrap} (KRaft)"):
        kafka.start(config.paths, config.kafka)
    with step("Kafka topics"):
        created = ensure_topics(config.kafka.bootstrap)
        say(f"   created {len(created)} topics" if created else "   all topics exist")
    with step(f"Jaeger on {config.jaeger.query_url} (OTLP gRPC {config.jaeger.otlp_grpc_endpoint})"):
        jaeger.start(config.paths, config.jaeger)


def down(config: StackConfig) -> None:
    with step("stop Jaeger"):
        say("   stopped" if jaeger.stop(config.paths) else "   was not running")
    with step("stop Kafka"):
        say("   stopped" if kafka.stop(config.paths) else "   was not running")
    with step("stop Docker engine (only if trialog started it)"):
        say("   stopped" if docker_engine.stop(config.paths) else "   not started by trialog; left running")
    (config.paths.home / "stack.json").unlink(missing_ok=True)


def status(config: StackConfig) -> dict[str, Health]:
    return {
        "docker": docker_engine.health(config.paths),
        "kafka": kafka.health(config.paths, config.kafka),
        "jaeger": jaeger.health(config.jaeger),
    }


def status_json(report: dict[str, Health]) -> dict[str, Any]:
    return {
        "healthy": all(h.healthy for h in report.values()),
        "components": {name: h.to_json() for name, h in report.items()},
    }
