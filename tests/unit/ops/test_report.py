"""The run report's figures, charts, page and trace links (`ops.report`)."""

from __future__ import annotations

import dataclasses
import xml.etree.ElementTree as ET

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ops.audit import LogRecord
from ops.report.data import gather
from ops.report.html import render_page
from ops.report.links import trace_id, trace_url
from ops.report.svg import bar_chart, histogram, histogram_chart, nice_step
from ops.runlog import LoggedRun
from ops.telemetry.otel import OtelTracer
from schemas.blobs import BlobRef
from schemas.codec import default_codec
from schemas.common import FailureClass, Producer, RecordMeta
from schemas.publications import PolicyPublished
from streams.telemetry import tracing
from tests.unit.ops.test_audit import Episode, healthy_run

SVG = "{http://www.w3.org/2000/svg}"


def test_the_trace_link_names_the_trace_the_tracer_puts_the_episodes_spans_in() -> None:
    exporter = InMemorySpanExporter()
    tracer = OtelTracer("trialog-streams", SimpleSpanProcessor(exporter))
    with tracing.installed(tracer), tracing.span("owner.episode.commands", "ep-é1"):
        pass
    tracer.shutdown()
    (span,) = exporter.get_finished_spans()
    assert span.get_span_context() is not None
    expected = f"{span.get_span_context().trace_id:032x}"
    assert trace_id("ep-é1") == expected and len(expected) == 32
    assert trace_id("ep-é2") != expected
    assert trace_url("ep-é1", "http://127.0.0.1:16686/") == f"http://127.0.0.1:16686/trace/{expected}"


def test_ticks_are_round_numbers() -> None:
    assert nice_step(1.0) == 0.2 and nice_step(10.0) == 2.0 and nice_step(37.0) == 10.0
    assert nice_step(0.0) == 1.0


def test_histogram_bins_cover_every_value_once() -> None:
    bins = histogram([0.0, 0.1, 0.5, 0.9, 1.0], bins=2)
    assert bins == [(0.0, 0.5, 2), (0.5, 1.0, 3)]
    assert histogram([2.0, 2.0]) == [(2.0, 2.0, 2)] and histogram([]) == []


def test_a_bar_chart_is_well_formed_svg_with_escaped_text_and_one_rect_per_bar() -> None:
    svg = bar_chart("<reward> & co", [("v0", 0.5), ("v1", -0.2), ("<v2>", 1.0)], unit=" pts")
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg"
    rects = root.findall(f"{SVG}rect")
    assert len(rects) == 3
    titles = [rect.find(f"{SVG}title").text for rect in rects]  # type: ignore[union-attr]
    assert titles == ["v0: 0.5 pts", "v1: -0.2 pts", "<v2>: 1 pts"]
    assert rects[1].get("fill") != rects[0].get("fill")  # a negative reward is drawn below zero, in red
    zero = float(rects[0].get("y") or 0) + float(rects[0].get("height") or 0)
    assert float(rects[1].get("y") or 0) == pytest.approx(zero, abs=0.2)  # the negative bar hangs from zero


def test_an_empty_chart_says_why() -> None:
    root = ET.fromstring(histogram_chart("verify stage latency", [], unit="seconds", empty="no verify step"))
    assert "no verify step" in "".join(root.itertext()) and root.find(f"{SVG}rect") is None


def _policy(version: int, at_us: int) -> bytes:
    meta = RecordMeta(f"p{version}", at_us, Producer("learner", "l1"))
    return default_codec().encode(
        PolicyPublished(meta, "r", version, version - 1, "u", BlobRef("0" * 64, 1), 4)
    )


def test_gathered_figures_of_a_run_with_a_failure() -> None:
    log = healthy_run(3)
    Episode(log, "ep-f").start().step("ls").fail(FailureClass.POLICY_TIMEOUT)
    data = gather(LoggedRun.collect(log.records), "r7")
    assert (data.episodes, data.completed, data.failed, data.in_flight) == (4, 3, 1, 0)
    assert data.reward_by_version == [(1, 1.0, 3)] and data.mean_reward == 1.0
    assert data.ended_per_minute == [4]
    assert len(data.stage_latency_s["sandbox"]) == 7 and len(data.stage_latency_s["verify"]) == 3
    assert all(value > 0 for value in data.stage_latency_s["policy"])
    assert [step for step, _, _ in data.sandbox_by_step] == [0, 1]
    assert data.failures == {"policy_timeout": 1} and data.verdicts == {"pass": 3}
    assert data.staleness is None  # no policy version published: nothing consumed
    assert [row.episode for row in data.failed_rows] == ["ep-f"]
    assert "policy_timeout: gave up" in data.failed_rows[0].detail


def test_staleness_is_the_policy_lag_of_trajectories_completed_before_an_update() -> None:
    log = healthy_run(2)
    # ep-* trajectories were sampled by version 1 and completed at ~START+13 ms; version 3 was current then.
    records = [
        *log.records,
        LogRecord("policy.versions", 0, 0, None, _policy(3, 1_600_000_000_000_000)),
        LogRecord("policy.versions", 0, 1, None, _policy(4, 1_800_000_000_000_000)),
    ]
    data = gather(LoggedRun.collect(records), "r")
    assert data.staleness == [2, 2] and data.policy_versions == 2


def test_the_page_is_self_contained_and_links_each_listed_episode_to_its_trace() -> None:
    log = healthy_run(2)
    Episode(log, "ep-<f>").start().fail(FailureClass.SANDBOX_CRASH)
    page = render_page(gather(LoggedRun.collect(log.records), "r<1>"), "http://jaeger:16686")
    assert page.startswith("<!DOCTYPE html>") and "<script" not in page and "<link" not in page
    assert "src=" not in page and "url(" not in page
    assert "trialog run r&lt;1&gt;" in page and "ep-&lt;f&gt;" in page
    for episode in ("ep-0", "ep-1", "ep-<f>"):
        assert f'href="http://jaeger:16686/trace/{trace_id(episode)}"' in page
    assert "No trajectory was consumed by a learner" in page


@pytest.mark.parametrize("rows", [0, 1])
def test_the_tables_hold_at_most_the_rows_asked_for(rows: int) -> None:
    data = gather(LoggedRun.collect(healthy_run(3).records), "r", rows=rows)
    assert len(data.slowest) == rows
    assert dataclasses.asdict(data)["run"] == "r"


def test_the_page_lists_the_runs_alerts_escaped_with_counts_by_severity() -> None:
    from actors.guard.alerts import AlertEngine, AlertSettings
    from tests.unit.actors.test_alerts import RUN, _origin, canary

    engine = AlertEngine(RUN, AlertSettings(), _origin())
    alerts = engine.observe(canary(False, case="hack:<script>")) + engine.observe(canary(False))
    log = healthy_run(1)
    codec = default_codec()
    records = [
        *log.records,
        *(LogRecord("alerts", 0, i, None, codec.encode(a)) for i, a in enumerate(alerts)),
    ]
    records.append(LogRecord("alerts", 0, 9, None, codec.encode(alerts[0])))  # written twice: listed once
    data = gather(LoggedRun.collect(records), RUN)
    assert data.alerts_total == 2 and data.alerts_by_severity["critical"] == 2
    page = render_page(data, "http://jaeger:16686")
    assert "<h2>Alerts (2)</h2>" in page and "2 alerts (critical 2); all shown" in page
    assert "case=hack:&lt;script&gt;, task=task-1" in page and "<script" not in page
    assert page.count("<td>canary_failed</td>") == 2
    quiet = render_page(gather(LoggedRun.collect(log.records), RUN), "http://j")
    assert "No alert was raised." in quiet
    old = render_page(gather(LoggedRun.collect(log.records), RUN, alerts_read=False), "http://j")
    assert "The run has no alerts topic" in old


def test_each_reward_component_and_a_configuration_change_are_shown() -> None:
    from schemas.events import RewardAssigned
    from schemas.versions import GradeVersions

    run = LoggedRun.collect(healthy_run(3).records)
    page = render_page(gather(run, "r"), "http://jaeger:16686")
    assert "No component was measured" in page and "graded before v4" in page
    for index, (config, efficiency) in enumerate([("a" * 64, 0.25), ("a" * 64, 0.5), ("b" * 64, 0.75)]):
        events = run.episodes[f"ep-{index}"].events
        for position, logged in enumerate(events):
            if isinstance(logged.event, RewardAssigned):
                graded = dataclasses.replace(
                    logged.event, reward=0.9, outcome_reward=0.8, components=(("efficiency", efficiency),),
                    versions=GradeVersions("v", "i", "t", config),
                )  # fmt: skip
                events[position] = dataclasses.replace(logged, event=graded)
    data = gather(run, "r")
    assert data.outcome_rewards == [0.8, 0.8, 0.8]
    assert data.reward_components == {"efficiency": [0.25, 0.5, 0.75]}
    assert data.reward_configs == [("a" * 64, 2), ("b" * 64, 1)]
    page = render_page(data, "http://jaeger:16686")
    assert "component efficiency" in page and "The configuration changed during the run." in page
    assert ("a" * 16) in page and ("b" * 16) in page
