"""The report's training sections: the learner's steps from its `stats.jsonl`, the held-out pass rate from a
demo's `demo.json`, tokens per second from the log, and the `trialog report` options that name the files."""

from __future__ import annotations

import json
import math
import re
import xml.etree.ElementTree as ET
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from learner.defaults import STATS_FILE
from learner.trainer import TrainStats
from ops.cli import report as report_cli
from ops.cli.main import build_parser
from ops.cli.main import main as trialog
from ops.demo.summary import DemoSummary, Evaluation, Training
from ops.report.data import gather, tokens_per_second
from ops.report.html import render_page
from ops.report.learner_steps import (
    HeldOut,
    LearnerStats,
    parse_lines,
    read_heldout,
    read_stats,
    staleness_histogram,
)
from ops.report.svg import line_chart
from ops.runlog import LoggedRun
from tests.unit.ops.test_audit import healthy_run

SVG = "{http://www.w3.org/2000/svg}"
KL = 0.0271828  # distinctive: found on the page only if the learner's figure got there


def _stats(loss: float, approx_kl: float, gap: float, seconds: float = 1.5, **more: Any) -> TrainStats:
    figures: dict[str, Any] = {
        "ratio_mean": 1.01, "clip_fraction": 0.125, "grad_norm": 0.75, "samples": 8, "tokens": 320,
        "pg_fraction": 0.9, "entropy": 1.75, "logprob_gap_mean": gap, "logprob_gap_max": gap * 10,
        "advantage_mean": 0.0, "advantage_std": 0.5, "advantage_min": -0.75, "advantage_max": 0.75,
    }  # fmt: skip
    return TrainStats(loss=loss, approx_kl=approx_kl, seconds=seconds, **(figures | more))


def learner_line(version: int, passes: list[TrainStats], staleness: list[list[int]]) -> str:
    """A line of stats.jsonl as `learner.learner.Learner._report` writes it."""
    stats, first = passes[-1], passes[0]
    flat = [lag for group in staleness for lag in group]
    line = {
        "version": version,
        "groups": [f"task-{i}" for i in range(len(staleness))],
        "trajectories": len(flat),
        "episodes": [f"ep-{version}-{i}" for i in range(len(flat))],
        "partial": [False for _ in staleness],
        "rewards": [[1.0 for _ in group] for group in staleness],
        "staleness": staleness,
        "train": asdict(stats),
        "passes": [asdict(p) for p in passes],
        "mismatch": {"mean": first.logprob_gap_mean, "max": first.logprob_gap_max},
        "staleness_histogram": {str(k): flat.count(k) for k in sorted(set(flat))},
        "samples": {"usable": stats.samples, "truncated": 0},
        "counters": {"trained": version},
        "held": 0,
        "idle_fraction": 0.25,
    }
    return json.dumps(line) + "\n"


def two_steps(folder: Path) -> Path:
    path = folder / STATS_FILE
    path.write_text(
        learner_line(1, [_stats(0.5, 0.001, 0.002)], [[0, 0], [1, 1]])
        # two passes: the step's figures are the last pass's, its mismatch the first's, its time both
        + learner_line(2, [_stats(0.4, 0.003, 0.0625, 2.0), _stats(0.3, KL, 0.5, 3.0)], [[3, 3]]),
        encoding="utf-8",
    )
    return path


def test_a_stats_file_reads_as_the_learner_wrote_it(tmp_path: Path) -> None:
    first, second = read_stats(two_steps(tmp_path))
    assert (first.version, first.trajectories, first.passes, first.loss) == (1, 4, 1, 0.5)
    assert (second.version, second.trajectories, second.passes) == (2, 2, 2)
    assert second.loss == 0.3 and second.approx_kl == KL and second.seconds == 5.0
    assert (second.gap_mean, second.gap_max) == (0.0625, 0.625)  # the first pass's: before the update
    assert (second.clip_fraction, second.pg_fraction, second.grad_norm, second.tokens) == (
        0.125,
        0.9,
        0.75,
        320,
    )
    assert (second.advantage_min, second.advantage_max, second.entropy) == (-0.75, 0.75, 1.75)
    assert first.staleness == {0: 2, 1: 2} and second.staleness == {3: 2}
    # every step's trajectories together; lag 2, which none had, is a bar of 0
    assert staleness_histogram([first, second]) == {0: 2, 1: 2, 2: 0, 3: 2}


def test_a_line_from_an_older_learner_reads_with_its_later_figures_not_recorded() -> None:
    old = {
        "version": 4, "trajectories": 3, "staleness": [[0, 2], [2]],
        "train": {"loss": 0.1, "ratio_mean": 1.0, "clip_fraction": 0.0, "grad_norm": 0.2, "samples": 3,
                  "tokens": 30, "seconds": 0.5},
    }  # fmt: skip
    (step,) = parse_lines([json.dumps(old)], "old.jsonl")
    assert step.approx_kl is None and step.gap_mean is None and step.entropy is None
    assert step.seconds == 0.5 and step.passes == 1
    assert step.staleness == {0: 1, 2: 2}  # counted from the per-group lists
    page = render_page(
        gather(LoggedRun.collect(healthy_run(1).records), "r"), "http://j",
        learner=LearnerStats(Path("old.jsonl"), (step,), exists=True),
    )  # fmt: skip
    assert "not recorded (the learner that wrote the file predates this figure)" in page


def test_a_missing_stats_file_is_no_step(tmp_path: Path) -> None:
    assert read_stats(tmp_path / "nowhere" / STATS_FILE) == []


@pytest.mark.parametrize(
    ("broken", "says"),
    [
        ('{"version": 3, "train": ', "not a learner step (Expecting value"),
        ("[1, 2]", "a JSON list, not an object"),
        ('{"version": 3, "trajectories": 1, "train": {"loss": 0.1}}', "train.seconds is missing"),
        ('{"version": "3", "trajectories": 1, "train": {}}', "version is '3', not a number"),
        (
            learner_line(5, [_stats(0.1, 0.1, 0.1)], [[3, 3]]).replace('{"3": 2}', '{"three": 2}').strip(),
            "staleness_histogram has 'three', not a number of versions",
        ),
    ],
)
def test_a_malformed_line_is_an_error_naming_the_file_and_the_line(
    tmp_path: Path, broken: str, says: str
) -> None:
    path = two_steps(tmp_path)
    with path.open("a", encoding="utf-8") as out:
        out.write("\n" + broken + "\n")  # line 3 is blank and skipped: the broken one is line 4
    with pytest.raises(ValueError, match=re.escape(f"{path}, line 4: ")) as raised:
        read_stats(path)
    assert says in str(raised.value)


def escape_free(text: str) -> str:
    """`text` as the page writes it (tmp paths hold no character that HTML escapes, but say so)."""
    assert not set(text) & set("<>&\"'"), text
    return text


def _svgs(page: str) -> list[ET.Element]:
    return [ET.fromstring(svg) for svg in re.findall(r"<svg .*?</svg>", page)]


def test_the_page_charts_and_tabulates_every_step(tmp_path: Path) -> None:
    path = two_steps(tmp_path)
    learner = LearnerStats(path, tuple(read_stats(path)), exists=True)
    page = render_page(gather(LoggedRun.collect(healthy_run(1).records), "r"), "http://j", learner=learner)
    section = page.split("<h2>Learner steps (2)</h2>")[1].split("<h2>")[0]
    svgs = _svgs(section)
    titles = [svg.get("aria-label") for svg in svgs]
    assert titles == [
        "loss", "policy-gradient and clip fraction", "approximate KL to the behaviour policy", "entropy",
        "gradient norm (before clipping)", "advantages", "tokens trained",
        "rollout/learner log-prob gap per token", "step time", "staleness of trained trajectories",
    ]  # fmt: skip
    hovers = ["".join(mark.itertext()) for svg in svgs for mark in svg.iter(f"{SVG}title")]
    assert "KL (k3), v2: 0.0272" in hovers and "KL (k3), v1: 0.001" in hovers
    assert "max, v2: 0.625 nats" in hovers and "every pass, v2: 5 s" in hovers
    assert "3: 2 trajectories" in hovers and "2: 0 trajectories" in hovers  # the staleness bars
    rows = re.findall(r"<tr><td>v\d+</td>.*?</tr>", section)
    assert len(rows) == 2
    assert rows[1] == (
        "<tr><td>v2</td><td>2</td><td>0.3</td><td>0.02718</td><td>0.125</td><td>0.75</td><td>0.0625</td>"
        "<td>0.625</td><td>5.00</td></tr>"
    )
    assert escape_free(str(path)) in section


def test_without_a_stats_file_the_section_says_where_it_looked(tmp_path: Path) -> None:
    path = tmp_path / "runs" / "r" / "learner" / STATS_FILE
    learner = LearnerStats(path, tuple(read_stats(path)), exists=path.is_file())
    page = render_page(gather(LoggedRun.collect(healthy_run(1).records), "r"), "http://j", learner=learner)
    section = page.split("<h2>Learner steps (0)</h2>")[1].split("<h2>")[0]
    assert f"No learner stats: there is no file at {escape_free(str(path))}" in section
    assert "<svg" not in section
    (tmp_path / "empty.jsonl").write_text("")
    empty = LearnerStats(tmp_path / "empty.jsonl", (), exists=True)
    assert "holds no step yet" in render_page(gather(LoggedRun.collect([]), "r"), "http://j", learner=empty)


def _evaluation(version: int, passed: int, episodes: int = 8) -> Evaluation:
    samples = tuple((f"task-{i % 2}", i, i < passed) for i in range(episodes))
    run = f"demo-eval-v{version}"
    return Evaluation(run, version, episodes, passed, episodes, {}, passed / episodes, 9.0, samples)


def demo_json(folder: Path) -> Path:
    """A demo.json written the way `trialog demo` writes it."""
    training = Training("demo-train", 60.0, 40, 38, 20, {}, [1, 2, 3], 36)
    summary = DemoSummary(_evaluation(0, 2), training, _evaluation(3, 7), between=(_evaluation(2, 3),))
    path = folder / "demo.json"
    path.write_text(json.dumps(summary.to_json(), indent=2) + "\n")
    return path


def test_the_heldout_section_draws_the_pass_rate_of_each_evaluated_version(tmp_path: Path) -> None:
    heldout = read_heldout(demo_json(tmp_path))
    assert [(e.label, e.policy_version, e.passed, e.episodes) for e in heldout.evaluations] == [
        ("before", 0, 2, 8), ("between", 2, 3, 8), ("after", 3, 7, 8),
    ]  # fmt: skip
    assert heldout.verdict.startswith("held-out pass rate rose")
    page = render_page(gather(LoggedRun.collect(healthy_run(1).records), "r"), "http://j", heldout=heldout)
    section = page.split("<h2>Held-out pass rate by version</h2>")[1].split("<h2>")[0]
    (chart,) = _svgs(section)
    hovers = ["".join(mark.itertext()) for mark in chart.iter(f"{SVG}title")]
    assert hovers == ["pass rate, v0: 0.25", "pass rate, v2: 0.375", "pass rate, v3: 0.875"]
    assert "<td>after</td><td>v3</td><td>7/8</td><td>87.5%</td>" in section
    assert "Held-out pass rate" not in render_page(gather(LoggedRun.collect([]), "r"), "http://j")


def test_a_file_that_is_not_a_demo_summary_is_an_error_naming_it(tmp_path: Path) -> None:
    path = tmp_path / "demo.json"
    path.write_text(json.dumps({"before": {"policy_version": 0, "passed": 1}, "after": {}}))
    with pytest.raises(
        ValueError, match=re.escape(f"{path}: not a demo summary (before.episodes is missing)")
    ):
        read_heldout(path)


def test_tokens_per_second_are_the_policys_generated_tokens_over_each_minute_covered() -> None:
    data = gather(LoggedRun.collect(healthy_run(3).records), "r")
    # 3 episodes of 3 actions (two commands and a submit) of 3 tokens, within a second: at least one second
    assert data.generated_tokens == 27 and data.tokens_per_second == [27.0]
    # 600 tokens in the first whole minute, 30 in the 30 s of the second the run covered
    assert tokens_per_second({0: 600, 1: 30}, 0, 90_000_000) == [10.0, 1.0]
    assert tokens_per_second({1: 60}, 0, 120_000_000) == [0.0, 1.0]
    page = render_page(data, "http://j")
    assert 'aria-label="policy tokens generated per second"' in page and "<td>27</td>" in page


def test_a_line_chart_leaves_out_what_is_not_finite_and_escapes_its_text() -> None:
    svg = line_chart(
        "<loss>", [("a&b", [(1.0, 0.5), (2.0, math.nan), (3.0, -0.25)]), ("c", [(1.0, 1.0)])], x_prefix="v"
    )
    root = ET.fromstring(svg)
    assert len(root.findall(f"{SVG}polyline")) == 2
    hovers = ["".join(mark.itertext()) for mark in root.iter(f"{SVG}title")]
    assert hovers == ["a&b, v1: 0.5", "a&b, v3: -0.25", "c, v1: 1"]
    assert "1 non-finite values not drawn" in "".join(root.itertext())
    nothing = ET.fromstring(line_chart("kl", [("kl", [(1.0, math.inf)])]))
    assert "1 values, none finite" in "".join(nothing.itertext()) and nothing.find(f"{SVG}polyline") is None


def test_an_explicit_stats_file_that_is_not_there_is_refused_before_kafka(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_kafka(*_: object) -> str:
        raise AssertionError("Kafka was asked although a file named on the command line is not there")

    monkeypatch.setattr(report_cli, "kafka_of", no_kafka)
    missing = tmp_path / "nope.jsonl"
    assert trialog(["report", "r1", "--out", str(tmp_path), "--learner-stats", str(missing)]) == 2
    err = capsys.readouterr().err
    assert f"--learner-stats {missing}: no such file" in err and "--checkpoint-dir" in err
    assert trialog(["report", "r1", "--out", str(tmp_path), "--heldout", str(missing)]) == 2
    assert f"--heldout {missing}: no such file" in capsys.readouterr().err
    broken = tmp_path / STATS_FILE
    broken.write_text("{not json\n")
    assert trialog(["report", "r1", "--out", str(tmp_path), "--learner-stats", str(broken)]) == 2
    assert f"{broken}, line 1: not a learner step" in capsys.readouterr().err


def test_the_default_stats_file_is_where_the_stack_points_the_learner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("TRIALOG_HOME", str(tmp_path))
    args = build_parser().parse_args(["report", "r1", "--out", str(tmp_path / "out")])
    learner = report_cli.learner_stats_of(args)
    assert learner.path == tmp_path.resolve() / "runs" / "r1" / "learner" / STATS_FILE
    assert not learner.exists and learner.steps == ()
    assert not (tmp_path / "runs").exists()  # looking did not create the folders
    learner.path.parent.mkdir(parents=True)
    two_steps(learner.path.parent)
    found = report_cli.learner_stats_of(args)
    assert found.exists and [step.version for step in found.steps] == [1, 2]
    assert report_cli.heldout_of(args) is None
    monkeypatch.setenv("COLUMNS", "200")
    with pytest.raises(SystemExit):
        build_parser().parse_args(["report", "--help"])
    help_text = capsys.readouterr().out
    assert report_cli.DEFAULT_LEARNER_STATS in help_text and "--heldout" in help_text
    assert "trialog report RUN --out reports/RUN --heldout" in help_text


def test_held_out_and_learner_stats_given_explicitly_reach_the_page(tmp_path: Path) -> None:
    args = build_parser().parse_args([
        "report", "r1", "--out", str(tmp_path / "out"),
        "--learner-stats", str(two_steps(tmp_path)), "--heldout", str(demo_json(tmp_path)),
    ])  # fmt: skip
    learner, heldout = report_cli.learner_stats_of(args), report_cli.heldout_of(args)
    assert isinstance(heldout, HeldOut) and len(learner.steps) == 2
    page = report_cli.write_report(
        LoggedRun.collect(healthy_run(1).records), "r1", tmp_path / "out", "http://j",
        learner=learner, heldout=heldout,
    )  # fmt: skip
    text = page.read_text(encoding="utf-8")
    assert "<h2>Held-out pass rate by version</h2>" in text and "<h2>Learner steps (2)</h2>" in text
    assert "<td>0.02718</td>" in text
