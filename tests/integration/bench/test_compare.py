"""`trialog bench compare`'s crash and churn parts, with tiny settings, on the stack's real Docker engine:
the figures have the structure and the invariants the sections claim, and nothing is left behind."""

from __future__ import annotations

import argparse

import docker

from ops.bench import compare
from ops.bench.compare import churn, crash


def _args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    compare.add_arguments(parser)
    return parser.parse_args([*argv, "--no-record"])


def _bench_containers(client: docker.DockerClient, value: str) -> list[str]:
    found = client.api.containers(all=True, filters={"label": f"{crash.BENCH_LABEL}={value}"})
    return [str(container["Id"]) for container in found]


def test_resume_redoes_at_most_the_step_in_flight_and_the_restore(docker_client: docker.DockerClient) -> None:
    args = _args("--crash-episodes", "2", "--crash-steps", "4", "--crash-step-s", "0.3", "--crash-seed", "3")
    plan = crash.plan_crashes(2, 4, 3)
    comparison = crash.measured(args)  # raises if the two sides end with different workspaces

    assert [cost.crash_step for cost in comparison.restart] == [c.step for c in plan]
    assert [cost.crash_step for cost in comparison.resume] == [c.step for c in plan]
    one_step = max(comparison.step_s)
    for restart, resume in zip(comparison.restart, comparison.resume, strict=True):
        assert restart.final_snapshot == resume.final_snapshot
        # The crash cost the part of the step in flight, never more than the step; resume then only
        # acquires a warm sandbox and restores, restart runs every earlier step again.
        assert resume.lost_s < one_step + 0.5
        assert resume.redone_s <= resume.lost_s + resume.recovery_s + 1e-9
        assert resume.recovery_s < one_step
        assert restart.recovery_s >= restart.crash_step * min(comparison.step_s) * 0.9
        assert resume.snapshot_s > 0  # every step was snapshotted
    assert _bench_containers(docker_client, "crash") == []
    section = crash.render(args, "here", comparison)
    assert section.startswith("## compare: crash cost\n")


def test_every_churn_variant_is_measured_and_every_container_removed(
    docker_client: docker.DockerClient,
) -> None:
    args = _args("--churn-rounds", "2", "--churn-sustain-s", "0.3", "--churn-threads", "2")
    results, runtimes, machine = churn.measured(args)

    assert runtimes[0] == docker_client.info()["DefaultRuntime"]
    names = {(result.name, result.runtime) for result in results}
    assert len(names) == len(results)  # one row per variant and runtime
    assert any(result.name.startswith("`docker run") for result in results)
    assert {runtime for _, runtime in names} >= set(runtimes)  # the bare config on every runtime
    for result in results:
        assert len(result.latencies) == 2 and all(latency > 0 for latency in result.latencies)
        if result.name.startswith("trialog warm pool"):
            assert result.rates == {}
        else:
            assert set(result.rates) == {1, 2} and all(rate > 0 for rate in result.rates.values())
    assert _bench_containers(docker_client, churn.LABEL_VALUE) == []
    section = churn.render(args, machine, results, runtimes)
    assert section.startswith("## compare: sandbox churn\n")
