"""`trialog bench compare`'s long-tail part, its pure parts: the latency model (deterministic per seed, the
distribution it promises), the simulated learner (batches, staleness), the loop's step accounting and
the idle-fraction arithmetic; and the command's options."""

from __future__ import annotations

import math
import statistics
import threading

import pytest

from actors.rollout.simulated import STEPS_FILE, LatencyModel, SimulatedPolicy, action_at
from ops.bench.compare import PARTS
from ops.bench.compare.sim_learner import SimLearner
from ops.bench.compare.sync_loop import loop_batches, mini_batches, run_loop
from ops.bench.compare.tail import check_args, loop_staleness
from ops.bench.compare.tail_pipeline import PipelineSettings, warm_up_episode
from ops.bench.compare.timeline import Rate, Timeline, Update
from ops.cli.main import bench_parser
from schemas.actions import RunCommand, Submit
from streams.errors import StackError

# -- the latency model ---------------------------------------------------------------------------------------


def test_the_model_is_a_function_of_the_seed_and_step_only() -> None:
    model, again = LatencyModel(), LatencyModel()
    assert [model.turns(s) for s in range(50)] == [again.turns(s) for s in range(50)]
    assert [model.step_latency(7, k) for k in range(20)] == [again.step_latency(7, k) for k in range(20)]
    # Different seeds and steps differ (not one constant).
    assert len({model.step_latency(s, 0) for s in range(20)}) == 20
    assert len({model.turns(s) for s in range(200)}) > 5


def test_turns_are_uniform_with_a_share_of_long_episodes() -> None:
    model = LatencyModel(min_turns=4, max_turns=16, long_turns=60, long_share=0.1)
    turns = [model.turns(seed) for seed in range(4000)]
    longs = sum(1 for t in turns if t == 60)
    assert 0.08 < longs / len(turns) < 0.12
    short = [t for t in turns if t != 60]
    assert min(short) == 4 and max(short) == 16
    assert abs(statistics.mean(short) - 10) < 0.3


def test_step_latency_is_log_normal_with_the_median_and_clip() -> None:
    model = LatencyModel(median_s=0.5, sigma=1.0, max_s=8.0)
    latencies = [model.step_latency(seed, step) for seed in range(200) for step in range(20)]
    assert abs(statistics.median(latencies) / 0.5 - 1) < 0.08
    logs = [math.log(x) for x in latencies if x < 8.0]
    assert 0.85 < statistics.pstdev(logs) < 1.1  # the clip cuts a little of the upper tail only
    assert max(latencies) == 8.0  # the tail reaches the clip and no further
    assert sum(1 for x in latencies if x > 5.0) > 0.005 * len(latencies)  # 10x the median: a real tail


def test_the_spec_reads_back_and_bad_ones_are_refused() -> None:
    model = LatencyModel(
        median_s=1.5, sigma=0.5, max_s=20, min_turns=2, max_turns=9, long_turns=30, long_share=0.2
    )
    assert LatencyModel.parse(model.spec()) == model
    assert LatencyModel.parse("median=2") == LatencyModel(median_s=2.0)
    for bad in ("median=0", "sigma=-1", "turns=5-2", "long-share=2", "speed=1", "median", "turns=a-b"):
        with pytest.raises(ValueError):
            LatencyModel.parse(bad)


def test_the_policy_runs_a_command_per_turn_then_submits() -> None:
    model = LatencyModel()
    seed = next(s for s in range(100) if model.turns(s) == model.long_turns)
    actions = [action_at(model, seed, step) for step in range(model.long_turns + 1)]
    assert all(isinstance(a, RunCommand) and STEPS_FILE in a.command for a in actions[:-1])
    assert isinstance(actions[-1], Submit)
    slept: list[float] = []
    policy = SimulatedPolicy(model, sleep=slept.append)
    assert policy.model.most_steps == 61 and policy.name == "simulated"
    assert slept == []


# -- the learner's arithmetic ------------------------------------------------------------------------------


def test_idle_fraction_whole_and_steady() -> None:
    updates = (Update(10, 25, (0, 1)), Update(30, 45, (2, 3)), Update(45, 60, (4,)))
    timeline = Timeline(0.0, updates, completed=6, dropped=(5,))
    whole = timeline.whole
    assert (whole.seconds, whole.trained, whole.busy_s) == (60, 5, 45)
    assert whole.idle == pytest.approx(0.25) and whole.per_minute == pytest.approx(5)
    steady = timeline.steady
    assert steady is not None  # from 10 (first start) to 45 (last start): 2 updates, 30 s busy of 35
    assert (steady.seconds, steady.trained) == (35, 4)
    assert steady.idle == pytest.approx(5 / 35)
    assert Timeline(0.0, updates[:1], 2).steady is None
    assert Rate(0.0, 0, 0.0).idle == 0.0
    with pytest.raises(ValueError):
        Timeline(0.0, (Update(0, 10, ()), Update(5, 12, ())), 0)


def test_the_learner_trains_whenever_a_batch_is_there_and_drops_stale_ones() -> None:
    learner = SimLearner(batch=2, update_s=10, max_staleness=1)
    learner.arrive(0, 0)
    learner.tick(1.0)
    assert not learner.busy  # one is not a batch
    learner.arrive(1, 0)
    learner.tick(2.0)
    assert learner.busy and learner.next_due() == 12.0
    learner.arrive(2, 0)
    learner.arrive(3, 0)
    learner.tick(12.5)  # v1 published; seeds 2 and 3 (version 0) are 1 behind: within the bound
    assert learner.version == 1 and learner.busy
    learner.arrive(4, 0)
    learner.arrive(5, 1)
    learner.arrive(6, 1)
    learner.tick(23.0)  # v2: seed 4 (version 0) is 2 behind: dropped; 5 and 6 trained
    assert learner.version == 2 and learner.dropped == [4]
    assert [u.seeds for u in learner.updates] == [(0, 1), (2, 3)]
    learner.arrive(7, 2)
    learner.tick(33.5, draining=True)  # the last one alone, once nothing more can come
    learner.tick(44.0, draining=True)
    assert [u.seeds for u in learner.updates] == [(0, 1), (2, 3), (5, 6), (7,)]
    assert learner.staleness == [0, 0, 1, 1, 1, 1, 1]  # versions behind when each update started
    assert not learner.busy and learner.queue == []


# -- the loop's step accounting ----------------------------------------------------------------------------


class FakeEnv:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.executed: dict[int, int] = {}
        self.held = 0
        self.most_held = 0
        self.next_id = 0

    def acquire(self, count: int) -> list[int]:
        with self.lock:
            ids = list(range(self.next_id, self.next_id + count))
            self.next_id += count
            self.held += count
            self.most_held = max(self.most_held, self.held)
        return ids

    def execute(self, sandbox: int, action: RunCommand) -> None:
        with self.lock:
            self.executed[sandbox] = self.executed.get(sandbox, 0) + 1

    def verify(self, sandboxes: list[int]) -> list[float]:
        return [0.5 for _ in sandboxes]

    def release(self, sandboxes: list[int]) -> None:
        with self.lock:
            self.held -= len(sandboxes)


def test_loop_batches_cover_every_seed_once() -> None:
    assert loop_batches(10, 4) == [(0, 1, 2, 3), (4, 5, 6, 7), (8, 9)]
    with pytest.raises(ValueError):
        loop_batches(0, 4)


def test_the_loop_runs_in_lockstep_and_trains_every_episode_at_staleness_zero() -> None:
    model = LatencyModel(
        median_s=0.001, sigma=0.5, max_s=0.01, min_turns=1, max_turns=3, long_turns=8, long_share=0.3
    )
    env = FakeEnv()
    slept: list[float] = []
    lock = threading.Lock()

    def sleep(seconds: float) -> None:
        with lock:
            slept.append(seconds)

    result = run_loop(env, model, loop_batches(7, 3), update_s=0.02, max_staleness=0, sleep=sleep)
    timeline = result.timeline
    assert timeline.trained_seeds() == list(range(7)) and timeline.dropped == ()
    assert [step.seeds for step in result.steps] == [(0, 1, 2), (3, 4, 5), (6,)]
    assert env.most_held == 3 and env.held == 0  # acquired per step, all released
    for step in result.steps:
        (update,) = step.updates  # no batch given: the wave is one update
        assert step.started <= step.acquired <= step.rolled_out <= step.verified <= update.start
        assert step.steps == tuple(model.turns(seed) + 1 for seed in step.seeds)
        assert step.rewards == (0.5,) * len(step.seeds)
    assert sorted(env.executed.values()) == sorted(model.turns(seed) for seed in range(7))
    # The policy slept each step's latency (turns + the submit) and the learner its updates.
    expected = sorted(
        [model.step_latency(s, k) for s in range(7) for k in range(model.turns(s) + 1)] + [0.02] * 3
    )
    assert sorted(slept) == expected
    assert 0.0 <= timeline.whole.idle <= 1.0
    assert result.staleness == (0,) * 7


def test_the_loop_trains_a_wave_in_mini_batches_one_version_apart() -> None:
    model = LatencyModel(median_s=0.001, sigma=0.1, max_s=0.01, min_turns=1, max_turns=2, long_share=0)
    env = FakeEnv()
    slept: list[float] = []
    lock = threading.Lock()

    def sleep(seconds: float) -> None:
        with lock:
            slept.append(seconds)

    result = run_loop(env, model, loop_batches(7, 4), 0.5, max_staleness=1, batch=3, sleep=sleep)
    assert [[u.seeds for u in step.updates] for step in result.steps] == [[(0, 1, 2), (3,)], [(4, 5, 6)]]
    # The wave starts at one version; its second mini-batch trains one version later.
    assert result.staleness == (0, 0, 0, 1, 0, 0, 0)
    assert slept.count(0.5) == 3 and result.timeline.trained_seeds() == list(range(7))
    for step in result.steps:
        for before, after in zip(step.updates, step.updates[1:], strict=False):
            assert before.end <= after.start
    # A bound of 0 drops the later mini-batches: the rule is the learner's, not an exemption.
    strict = run_loop(FakeEnv(), model, loop_batches(4, 4), 0.0, max_staleness=0, batch=2, sleep=sleep)
    assert strict.timeline.trained_seeds() == [0, 1] and strict.timeline.dropped == (2, 3)


def test_mini_batches_and_the_loops_staleness() -> None:
    assert mini_batches((4, 5, 6, 7, 8), 2) == [(4, 5), (6, 7), (8,)]
    assert mini_batches((1,), 8) == [(1,)]
    with pytest.raises(ValueError):
        mini_batches((1,), 0)
    assert [loop_staleness(16, b) for b in (16, 8, 5, 1)] == [0, 1, 3, 15]


def test_the_pipeline_splits_the_warm_pool_and_warms_every_partition() -> None:
    settings = PipelineSettings(16, 96, 15, 2, pool=4, sandbox_workers=3)
    assert settings.pool_per_worker == 2 and settings.update_batch == 16
    assert PipelineSettings(16, 96, 15, 2, pool=4, sandbox_workers=8, batch=8).pool_per_worker == 1
    from kafka.partitioner.default import murmur2

    for partition in range(8):
        episode = warm_up_episode("run-x", partition, 0, 8)
        assert (murmur2(episode.encode()) & 0x7FFFFFFF) % 8 == partition
        assert warm_up_episode("run-x", partition, 1, 8) != episode


# -- the command ---------------------------------------------------------------------------------------------


def test_compare_options_are_checked_and_prefixed_by_part() -> None:
    parser, module = bench_parser("compare")
    args = parser.parse_args(["--parts", "tail", "--tail-episodes", "8", "--tail-staleness", "4,2"])
    assert args.parts == ["tail"] and args.tail_staleness == [2, 4] and args.tail_episodes == 8
    assert args.tail_sandbox_workers == [4] and args.tail_batch == 8
    check_args(args)  # 16 sandboxes in mini-batches of 8: the loop's last is 1 behind, within 2
    tight = parser.parse_args(["--tail-staleness", "0", "--tail-batch", "8"])
    with pytest.raises(StackError):
        check_args(tight)
    assert parser.parse_args(["--tail-sandbox-workers", "4,1"]).tail_sandbox_workers == [1, 4]
    assert isinstance(args.tail_latency_model, LatencyModel)
    assert "tail" in PARTS and module.__doc__
    for bad in (
        ["--parts", "nope"],
        ["--tail-staleness", "-1"],
        ["--tail-latency-model", "median=0"],
        ["--tail-sandbox-workers", "0"],
        ["--tail-batch", "0"],
    ):
        with pytest.raises(SystemExit):
            parser.parse_args(bad)
