"""The report page: one self-contained HTML document (inline CSS and SVG, no script, no external resource)."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from ops.replay import iso_time
from ops.report.data import STAGES, EpisodeRow, ReportData
from ops.report.links import trace_url
from ops.report.svg import bar_chart, histogram_chart

STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em; color: #222; max-width: 1100px; }
h1 { font-size: 1.5em; } h2 { font-size: 1.15em; margin-top: 1.8em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; font-size: 0.9em; } td, th { padding: 3px 10px; text-align: left; }
tr:nth-child(even) { background: #f3f5f8; } th { background: #e3e8ef; }
.summary td:first-child { color: #555; } .charts { display: flex; flex-wrap: wrap; gap: 12px; }
svg .title { font-size: 13px; font-weight: 600; } svg .tick { font-size: 10px; fill: #444; }
svg .note { font-size: 11px; fill: #555; } svg .grid { stroke: #e2e2e2; } svg .axis { stroke: #333; }
p.note { color: #555; font-size: 0.9em; }
"""


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], raw_columns: Sequence[int] = ()) -> str:
    """A table; cells are escaped except those in `raw_columns` (already markup)."""
    head = "".join(f"<th>{escape(h)}</th>" for h in headers)
    body = "".join(
        "<tr>"
        + "".join(f"<td>{c if i in raw_columns else escape(c)}</td>" for i, c in enumerate(row))
        + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _summary(data: ReportData) -> str:
    mean = "-" if data.mean_reward is None else f"{data.mean_reward:.3f}"
    span = (data.last_us - data.first_us) / 1e6
    rows = [
        ("run", data.run or "(default)"),
        ("first event", iso_time(data.first_us) if data.first_us else "-"),
        ("last event", iso_time(data.last_us) if data.last_us else "-"),
        ("span", f"{span:.1f} s"),
        ("episodes", str(data.episodes)),
        ("completed / failed / in flight", f"{data.completed} / {data.failed} / {data.in_flight}"),
        ("mean reward (completed)", mean),
        ("verdicts", ", ".join(f"{k} {v}" for k, v in data.verdicts.items()) or "-"),
        ("policy versions published", str(data.policy_versions)),
    ]
    body = "".join(f"<tr><td>{escape(k)}</td><td>{escape(v)}</td></tr>" for k, v in rows)
    return f'<table class="summary">{body}</table>'


def _episode_rows(rows: Sequence[EpisodeRow], query_base: str) -> list[list[str]]:
    return [
        [
            f'<a href="{escape(trace_url(row.episode, query_base))}">{escape(row.episode)}</a>',
            row.task_id,
            row.outcome,
            row.detail,
            f"{row.duration_s:.2f}",
            str(row.steps),
        ]
        for row in rows
    ]


def _staleness(data: ReportData) -> str:
    if data.staleness is None:
        return (
            '<p class="note">No trajectory was consumed by a learner: no policy version was published in '
            "this run.</p>"
        )
    if not data.staleness:
        return '<p class="note">Policy versions were published, but no completed trajectory before them.</p>'
    counts: dict[int, int] = {}
    for lag in data.staleness:
        counts[lag] = counts.get(lag, 0) + 1
    bars = [(str(lag), float(counts.get(lag, 0))) for lag in range(max(counts) + 1)]
    return bar_chart(
        "staleness of consumed trajectories", bars, x_label="policy versions behind", unit=" trajectories"
    )


def _alerts(data: ReportData) -> str:
    if not data.alerts_read:
        return '<p class="note">The run has no alerts topic (it was made before alerts existed).</p>'
    if not data.alerts_total:
        return '<p class="note">No alert was raised.</p>'
    counts = ", ".join(f"{severity} {count}" for severity, count in data.alerts_by_severity.items() if count)
    shown = (
        f"the last {len(data.alerts)} of {data.alerts_total}"
        if len(data.alerts) < data.alerts_total
        else "all"
    )
    rows = [
        [
            iso_time(alert.meta.occurred_at_us),
            alert.severity.value,
            alert.rule,
            ", ".join(f"{k}={v}" for k, v in sorted(alert.labels.items())),
            alert.summary,
            "-" if alert.value is None else f"{alert.value:g}",
            "-" if alert.threshold is None else f"{alert.threshold:g}",
        ]
        for alert in data.alerts
    ]
    headers = ("time", "severity", "rule", "labels", "summary", "value", "threshold")
    return (
        f'<p class="note">{data.alerts_total} alerts ({escape(counts)}); {shown} shown, oldest first '
        "(trialog alerts RUN lists them all).</p>" + _table(headers, rows)
    )


def render_page(data: ReportData, query_base: str) -> str:
    charts_rewards = bar_chart(
        "mean reward by policy version",
        [(f"v{version}", mean) for version, mean, _ in data.reward_by_version],
        x_label="policy version that sampled the episode",
        empty="no completed episode",
    )
    charts_rate = bar_chart(
        "episodes ended per minute",
        [(str(minute), float(count)) for minute, count in enumerate(data.ended_per_minute)],
        x_label="minutes since the run's first event",
        unit=" episodes",
        empty="no episode ended",
    )
    latency = "".join(
        histogram_chart(
            f"{stage} stage latency", data.stage_latency_s.get(stage, []), unit="seconds",
            empty=f"no {stage} step recorded",
        )
        for stage in STAGES
    )  # fmt: skip
    sandbox = bar_chart(
        "sandbox time per step (mean)",
        [(str(step), mean) for step, mean, _ in data.sandbox_by_step],
        x_label="step index",
        unit=" s",
        empty="no step executed",
    )
    failures = bar_chart(
        "failures by class",
        [(name, float(count)) for name, count in data.failures.items()],
        unit=" episodes",
        empty="no episode failed",
    )
    headers = ("episode (trace)", "task", "outcome", "result", "duration s", "steps")
    return "".join(
        [
            "<!DOCTYPE html>",
            '<html lang="en"><head><meta charset="utf-8">',
            f"<title>trialog run {escape(data.run or '(default)')}</title>",
            f"<style>{STYLE}</style></head><body>",
            f"<h1>trialog run {escape(data.run or '(default)')}</h1>",
            _summary(data),
            f"<h2>Alerts ({data.alerts_total})</h2>",
            _alerts(data),
            "<h2>Rewards and throughput</h2>",
            f'<div class="charts">{charts_rewards}{charts_rate}</div>',
            "<h2>Step latency by stage</h2>",
            '<p class="note">From the events\' own timestamps: policy = previous event to ActionProposed; '
            "sandbox = ActionProposed to StepExecuted; verify = submit to RewardAssigned.</p>",
            f'<div class="charts">{latency}{sandbox}</div>',
            "<h2>Failures</h2>",
            f'<div class="charts">{failures}</div>',
            "<h2>Staleness</h2>",
            _staleness(data),
            f"<h2>Slowest completed episodes ({len(data.slowest)})</h2>",
            _table(headers, _episode_rows(data.slowest, query_base), raw_columns=(0,)),
            f"<h2>Failed episodes ({len(data.failed_rows)})</h2>",
            _table(headers, _episode_rows(data.failed_rows, query_base), raw_columns=(0,))
            if data.failed_rows
            else '<p class="note">No episode failed.</p>',
            f'<p class="note">Trace links open {escape(query_base)} (Jaeger).</p>',
            "</body></html>",
        ]
    )
