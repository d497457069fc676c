"""Rewards beyond pass/fail through the real pipeline: `trialog run start --spawn` with a reward
configuration and step grading, on real Kafka and real Docker sandboxes.

The scripted policy applies each task's solution.patch, then submits. The verifier measures the static
signals too (`--static-signals`). With `--grade-steps every` the owner
asks the verifier to grade the untouched workspace and the one after the patch, beside the episode; every
final grade names the configuration's version and records each component apart, and the run's pin names
the same version.
"""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path

import docker

from actors.scheduler.defaults import DEFAULT_MAX_STEPS
from actors.tasks.reward_config import COMPONENTS, load
from ops.paths import REPO_ROOT
from schemas.events import RewardAssigned
from schemas.progress import StepGraded, process_rewards
from schemas.run_control import RunPinned
from schemas.topics import EPISODE_EVENTS, PROGRESS_RESULTS, RUN_CONTROL
from streams.kafka.reader import read_to_end

TASKS = REPO_ROOT / "examples" / "tasks"
EXAMPLES = (TASKS / "easy-fix-add", TASKS / "easy-fix-range")
CONFIG = REPO_ROOT / "examples" / "reward.toml"
EPISODES = 4


def test_a_run_composes_rewards_by_its_configuration_and_grades_steps_beside_the_episodes(
    kafka_bootstrap: str, docker_client: docker.DockerClient, tmp_path: Path
) -> None:
    run = f"rew{uuid.uuid4().hex[:8]}"
    env = {**os.environ, "TRIALOG_HOME": str(tmp_path / "home"), "PYTHONUNBUFFERED": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "ops.cli", "run", "start", "--tasks", *map(str, EXAMPLES), "--episodes",
         str(EPISODES), "--policy", "scripted", "--run", run, "--spawn", "--bootstrap", kafka_bootstrap,
         "--capacity", "4", "--reward-config", str(CONFIG), "--grade-steps", "every", "--static-signals"],
        cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    logs = "\n".join(p.read_text(errors="replace")[-3000:] for p in (tmp_path / "home").glob("runs/*/logs/*"))
    assert result.returncode == 0, f"{result.stderr}\n{logs}"
    assert f"ended {EPISODES}/{EPISODES} (completed {EPISODES}, failed 0)" in result.stderr, result.stderr
    config = load(CONFIG)

    [pin] = [v for _t, v in read_to_end(kafka_bootstrap, [RUN_CONTROL.of(run)]) if isinstance(v, RunPinned)]
    assert pin.reward_config == config.version
    events = [v for _t, v in read_to_end(kafka_bootstrap, [EPISODE_EVENTS.of(run)])]
    rewards = [v for v in events if isinstance(v, RewardAssigned)]
    assert len(rewards) == EPISODES
    for graded in rewards:
        components = dict(graded.components)
        assert graded.versions is not None and graded.versions.reward_config == config.version
        # Each measured in a real sandbox; the judge only with a model (--judge-model; unit-tested).
        assert set(components) == set(COMPONENTS) - {"judge"}, components
        assert components["no_leftovers"] == 1.0 and 0.0 < components["small_change"] < 1.0
        assert components["lint"] == components["types"] == 1.0  # the reference solutions add no finding
        assert components["efficiency"] == 1 - 2 / DEFAULT_MAX_STEPS  # the patch and the submit
        weighted = sum(config.weights.get(name, 0.0) * value for name, value in components.items())
        assert graded.outcome_reward == 1.0 and abs(graded.reward - (1.0 + weighted)) < 1e-9

    # Process grades: each episode's untouched workspace and the one after the patch, never awaited.
    grades = [
        v for _t, v in read_to_end(kafka_bootstrap, [PROGRESS_RESULTS.of(run)]) if isinstance(v, StepGraded)
    ]
    by_episode: dict[str, list[StepGraded]] = {}
    for grade in grades:
        by_episode.setdefault(grade.meta.episode_id, []).append(grade)
    # Best effort: a grade still queued when `run start` stops the workers at the end is never served (a
    # verifier of a long-lived deployment would serve it), so not every episode need have both.
    assert by_episode and set(by_episode) <= {r.meta.episode_id for r in rewards}
    complete = [g for g in by_episode.values() if {x.meta.step for x in g} == {0, 1}]
    assert complete, {episode: [g.meta.step for g in got] for episode, got in by_episode.items()}
    for episode_grades in complete:
        after = next(g for g in episode_grades if g.meta.step == 1)
        assert after.passed == after.total > 0  # the solution passes
        [reward] = process_rewards(1, episode_grades)
        assert reward is not None and 0.0 < reward <= 1.0  # the patch raised the pass rate
