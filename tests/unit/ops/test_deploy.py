"""The deployment files (`ops/deploy/`): every Kubernetes object validated against the Kubernetes API's own
models (the `kubernetes` client's, which refuse unknown and mistyped fields), every container's and compose
service's command line parsed by `trialog`'s real parser with its configuration file applied (so every
subcommand and flag they pass exists and every required one is there), and what a deployment relies on:
probes on the health port the configuration serves, a grace period above the worker's, resource requests,
secrets from Secrets, a RocksDB volume for each streams pod, the Docker socket where sandboxes are made."""

from __future__ import annotations

import argparse
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes.client import models
from pydantic import ValidationError

from ops.cli import config
from ops.cli.main import build_parser
from ops.paths import REPO_ROOT

DEPLOY = REPO_ROOT / "ops" / "deploy"
K8S = DEPLOY / "k8s"
KINDS = {
    ("v1", "ConfigMap"): models.V1ConfigMap,
    ("v1", "Service"): models.V1Service,
    ("v1", "PersistentVolumeClaim"): models.V1PersistentVolumeClaim,
    ("apps/v1", "StatefulSet"): models.V1StatefulSet,
    ("apps/v1", "Deployment"): models.V1Deployment,
    ("batch/v1", "Job"): models.V1Job,
}
WORKLOADS = ("StatefulSet", "Deployment", "Job")
# Every long-lived worker kind runs in the cluster; `run start` is the local composition of them all.
WORKER_KINDS = {"streams", "sandbox", "rollout", "verifier", "learner", "guard", "scheduler"}


def _documents() -> Iterator[tuple[str, dict[str, Any]]]:
    for path in sorted(K8S.glob("*.yaml")):
        if path.name == "kustomization.yaml":
            continue
        for document in yaml.safe_load_all(path.read_text()):
            if document is not None:
                yield path.name, document


DOCUMENTS = list(_documents())
WORKLOAD_DOCS = [(name, doc) for name, doc in DOCUMENTS if doc["kind"] in WORKLOADS]


def _id(item: tuple[str, dict[str, Any]]) -> str:
    return f"{item[0]}:{item[1]['kind']}/{item[1]['metadata']['name']}"


def _config_text() -> str:
    (configmap,) = [doc for _, doc in DOCUMENTS if doc["kind"] == "ConfigMap"]
    text: str = configmap["data"]["trialog.toml"]
    return text


def _parser_with(config_file: Path, environ: dict[str, str]) -> argparse.ArgumentParser:
    """`trialog`'s parser as a worker sees it: its configuration file applied (so an option the file sets
    need not be on the command line, and an unknown key in the file fails here)."""
    parser = build_parser()
    config.configure(parser, [], {**environ, config.CONFIG_ENV: str(config_file)})
    return parser


def _containers(document: dict[str, Any]) -> list[dict[str, Any]]:
    pod = document["spec"]["template"]["spec"]
    return [*pod.get("initContainers", []), *pod["containers"]]


@pytest.mark.parametrize("item", DOCUMENTS, ids=map(_id, DOCUMENTS))
def test_every_object_is_valid_for_the_kubernetes_api(item: tuple[str, dict[str, Any]]) -> None:
    _, document = item
    model = KINDS[(document["apiVersion"], document["kind"])]
    model.model_validate(document)  # strict: an unknown field or a wrong type raises
    assert "namespace" not in document["metadata"], "namespace-agnostic: kubectl -n names it"


def test_the_validation_refuses_unknown_and_mistyped_fields() -> None:
    """What the test above relies on: the models are strict at every depth."""
    (_, streams) = next(item for item in WORKLOAD_DOCS if item[1]["kind"] == "StatefulSet")
    misspelt = yaml.safe_load(yaml.safe_dump(streams))
    misspelt["spec"]["template"]["spec"]["containers"][0]["livenesProbe"] = {}
    mistyped = yaml.safe_load(yaml.safe_dump(streams))
    mistyped["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = "30"
    for broken in (misspelt, mistyped):
        with pytest.raises(ValidationError):
            models.V1StatefulSet.model_validate(broken)


def test_the_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((K8S / "kustomization.yaml").read_text())
    files = {path.name for path in K8S.glob("*.yaml")} - {"kustomization.yaml"}
    assert set(kustomization["resources"]) == files


def test_every_worker_kind_is_deployed_once() -> None:
    kinds = [
        container["args"][1]
        for _, document in WORKLOAD_DOCS
        for container in _containers(document)
        if container["args"][0] == "worker"
    ]
    assert sorted(kinds) == sorted(WORKER_KINDS)


@pytest.mark.parametrize("item", WORKLOAD_DOCS, ids=map(_id, WORKLOAD_DOCS))
def test_every_container_command_line_parses(item: tuple[str, dict[str, Any]], tmp_path: Path) -> None:
    _, document = item
    path = tmp_path / "trialog.toml"
    path.write_text(_config_text())
    for container in _containers(document):
        assert container["command"] == ["trialog"]
        env = {e["name"]: e.get("value", "secret") for e in container.get("env", [])}
        args = _parser_with(path, env).parse_args(container["args"])
        assert args.handler is not None
        assert env["TRIALOG_CONFIG"] == "/etc/trialog/config/trialog.toml"
        mounts = {m["mountPath"]: m["name"] for m in container["volumeMounts"]}
        assert mounts["/etc/trialog/config"] == "config"


@pytest.mark.parametrize("item", WORKLOAD_DOCS, ids=map(_id, WORKLOAD_DOCS))
def test_probes_grace_resources_and_secrets(item: tuple[str, dict[str, Any]]) -> None:
    _, document = item
    settings = tomllib.loads(_config_text())
    pod = document["spec"]["template"]["spec"]
    # The worker ends itself within its grace period, before the kubelet's SIGKILL.
    assert pod["terminationGracePeriodSeconds"] > settings["health"]["grace_s"]
    assert settings["health"]["host"] == "0.0.0.0"  # the kubelet probes the pod's address
    for container in _containers(document):
        (port,) = [p for p in container["ports"] if p["name"] == "health"]
        assert port["containerPort"] == settings["health"]["port"]
        assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "health"}
        assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "health"}
        resources = container["resources"]
        assert {"cpu", "memory"} <= set(resources["requests"]) and "memory" in resources["limits"]
        for variable in container.get("env", []):
            if any(word in variable["name"] for word in ("PASSWORD", "SECRET", "KEY_ID")):
                assert "secretKeyRef" in variable["valueFrom"], variable["name"]


def test_the_streams_workers_keep_rocksdb_on_a_volume_of_their_own() -> None:
    (document,) = [doc for _, doc in WORKLOAD_DOCS if doc["kind"] == "StatefulSet"]
    (container,) = document["spec"]["template"]["spec"]["containers"]
    data_dir = container["args"][container["args"].index("--data-dir") + 1]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    (claim,) = document["spec"]["volumeClaimTemplates"]
    assert mounts[claim["metadata"]["name"]] == data_dir
    assert document["spec"]["serviceName"] in {
        doc["metadata"]["name"] for _, doc in DOCUMENTS if doc["kind"] == "Service"
    }


def test_the_workers_that_make_sandboxes_reach_a_docker_engine() -> None:
    for _, document in WORKLOAD_DOCS:
        pod = document["spec"]["template"]["spec"]
        for container in pod["containers"]:
            if container["args"][1] in ("sandbox", "verifier"):
                sockets = {v["name"] for v in pod["volumes"] if "hostPath" in v}
                assert any(m["name"] in sockets for m in container["volumeMounts"])


def test_one_learner_and_one_guard_per_run() -> None:
    for _, document in WORKLOAD_DOCS:
        name = document["metadata"]["name"]
        if name in ("trialog-learner", "trialog-guard"):
            assert document["spec"]["replicas"] == 1 and document["spec"]["strategy"]["type"] == "Recreate"


# -- compose -----------------------------------------------------------------------------------------------

COMPOSE = yaml.safe_load((DEPLOY / "compose.yaml").read_text())
SERVICES = sorted(COMPOSE["services"])
# The compose specification's keys this file may use (a typo would be ignored by some compose versions).
SERVICE_KEYS = {
    "image", "network_mode", "entrypoint", "command", "stop_grace_period", "restart", "environment",
    "volumes", "healthcheck",
}  # fmt: skip


def test_compose_runs_every_worker_kind() -> None:
    assert {COMPOSE["services"][name]["command"][1] for name in SERVICES} == WORKER_KINDS


@pytest.mark.parametrize("name", SERVICES)
def test_every_compose_command_line_parses(name: str) -> None:
    service = COMPOSE["services"][name]
    assert set(service) <= SERVICE_KEYS, set(service) - SERVICE_KEYS
    assert service["entrypoint"] == ["trialog"] and service["network_mode"] == "host"
    environment = {key: str(value) for key, value in service["environment"].items()}
    assert environment["TRIALOG_CONFIG"] == "/etc/trialog/trialog.toml"
    assert "./trialog.toml:/etc/trialog/trialog.toml:ro" in service["volumes"]
    args = _parser_with(DEPLOY / "trialog.toml", environment).parse_args(service["command"])
    grace_s = tomllib.loads((DEPLOY / "trialog.toml").read_text())["health"]["grace_s"]
    assert args.grace_s == grace_s and int(service["stop_grace_period"].rstrip("s")) > grace_s
    if "healthcheck" in service:
        assert f"http://127.0.0.1:{args.health_port}/healthz" in " ".join(service["healthcheck"]["test"])
    if args.worker_kind in ("sandbox", "verifier"):
        assert "/var/run/docker.sock:/var/run/docker.sock" in service["volumes"]


def test_compose_health_ports_are_distinct() -> None:
    ports = [
        cmd[cmd.index("--health-port") + 1] for cmd in (COMPOSE["services"][n]["command"] for n in SERVICES)
    ]
    assert len(set(ports)) == len(ports)
