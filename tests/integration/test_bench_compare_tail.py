"""`trialog bench compare --parts tail` end to end with tiny settings, on real Kafka and Docker: the loop on
real sandboxes, the pipeline on real streams, sandbox (two, in one group) and verifier workers, the learner
in batches of 2. Checks the result's structure and invariants: every episode counted once (trained or
dropped as stale), the counts equal to the episodes completed, the idle fractions in [0, 1], and both
sides ran the same episodes, step for step."""

from __future__ import annotations

from ops.bench.compare.tail import HEADING, check, render, run_both
from ops.cli.main import bench_parser

EPISODES = 6


def test_the_loop_and_the_pipeline_run_the_same_episodes(kafka_bootstrap: str) -> None:
    parser, _ = bench_parser("compare")
    args = parser.parse_args(
        [
            "--parts", "tail", "--no-record", "--tail-episodes", str(EPISODES), "--tail-sandboxes", "3",
            "--tail-update-s", "1", "--tail-staleness", "1", "--tail-verifiers", "1", "--tail-batch", "2",
            "--tail-sandbox-workers", "2",
            "--tail-timeout-s", "300",
            "--tail-latency-model", "median=0.05,sigma=0.5,max=1,turns=1-3,long=6,long-share=0.3",
        ]
    )  # fmt: skip
    result = run_both(args, bootstrap=kafka_bootstrap)
    check(result, EPISODES)  # raises on a broken invariant; the same checks, spelled out:
    loop = result.loop.timeline
    assert loop.trained_seeds() == list(range(EPISODES)) and loop.completed == EPISODES
    assert [step.seeds for step in result.loop.steps] == [(0, 1, 2), (3, 4, 5)]
    assert [[u.seeds for u in step.updates] for step in result.loop.steps] == [[(0, 1), (2,)], [(3, 4), (5,)]]
    assert result.loop.staleness == (0, 0, 1, 0, 0, 1)  # a wave's second mini-batch is 1 version behind
    pipeline = result.pipelines[1, 2]
    timeline = pipeline.timeline
    assert sorted(pipeline.episode_s) == list(range(EPISODES))
    assert timeline.completed + timeline.failed == EPISODES
    assert sorted([*timeline.trained_seeds(), *timeline.dropped]) == list(range(EPISODES))
    assert timeline.trained == sum(len(update.seeds) for update in timeline.updates)
    assert all(staleness <= 1 for staleness in pipeline.staleness)
    loop_steps = {s: n for step in result.loop.steps for s, n in zip(step.seeds, step.steps, strict=True)}
    assert pipeline.steps == loop_steps  # the same turns per episode on both sides
    model = result.model
    assert loop_steps == {seed: model.turns(seed) + 1 for seed in range(EPISODES)}
    for rate in (loop.whole, loop.steady, timeline.whole):
        assert rate is not None and 0.0 <= rate.idle <= 1.0 and rate.per_minute > 0
    section = render(args, result)
    assert section.splitlines()[0] == HEADING == "## compare: long tail"
    assert "| pipeline | 2 | <= 1 |" in section and "| synchronous loop |" in section
