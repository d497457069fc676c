"""The sandbox image runs Python as a non-root user with no network at all."""

from __future__ import annotations

import json

import docker

from ops.stack.images import sandbox_ref
from ops.testing import LoopbackListener, owned_labels

PROBE = r"""
import json, os, socket, sys
port = int(sys.argv[1])
try:
    socket.create_connection(("127.0.0.1", port), timeout=2).close()
    reached_host = True
except OSError:
    reached_host = False
print(json.dumps({
    "uid": os.getuid(),
    "interfaces": sorted(os.listdir("/sys/class/net")),
    "reached_host": reached_host,
    "python": sys.version_info[:2],
}))
"""


def test_python_runs_in_the_sandbox_image_without_network(docker_client: docker.DockerClient) -> None:
    # A listener on the host's loopback: the sandbox must not be able to reach it.
    with LoopbackListener() as listener:
        output = docker_client.containers.run(
            str(sandbox_ref()),
            ["python3", "-c", PROBE, str(listener.port)],
            network_mode="none",
            labels=owned_labels("sandbox-smoke"),
            remove=True,
        )
    report = json.loads(output)
    assert report["uid"] != 0
    assert report["interfaces"] == ["lo"]
    assert report["reached_host"] is False
    assert report["python"][0] == 3
    assert listener.accepted == []


def test_the_engine_has_no_bridge_network(docker_client: docker.DockerClient) -> None:
    drivers = {network.attrs["Driver"] for network in docker_client.networks.list()}
    assert "bridge" not in drivers
