"""The report page: one self-contained HTML document (inline CSS and SVG, no script, no external resource)."""

from __future__ import annotations

from collections.abc import Sequence
from html import escape

from learner.defaults import STATS_FILE
from ops.replay import iso_time
from ops.report.data import STAGES, EpisodeRow, ReportData
from ops.report.learner_steps import HeldOut, LearnerStats, LearnerStep, staleness_histogram
from ops.report.links import trace_url
from ops.report.svg import Series, bar_chart, histogram_chart, line_chart

LEARNER_ROWS = 50  # the most recent steps in the table; the charts show every one
NOT_RECORDED = "not recorded (the learner that wrote the file predates this figure)"

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
        ("policy tokens generated", str(data.generated_tokens)),
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


def _by_version(steps: Sequence[LearnerStep], figures: Sequence[tuple[str, str]]) -> list[Series]:
    """One series per (name, LearnerStep attribute); a step without the figure (an older file) is no point."""
    series: list[Series] = []
    for name, attribute in figures:
        values = [(step.version, getattr(step, attribute)) for step in steps]
        series.append(
            (name, [(float(version), float(value)) for version, value in values if value is not None])
        )
    return series


def _learner_chart(
    title: str,
    steps: Sequence[LearnerStep],
    figures: Sequence[tuple[str, str]],
    *,
    unit: str = "",
    y_range: tuple[float, float] | None = None,
) -> str:
    series = _by_version(steps, figures)
    if not any(points for _, points in series):
        return line_chart(title, [], empty=NOT_RECORDED)
    return line_chart(title, series, x_label="policy version", x_prefix="v", unit=unit, y_range=y_range)


def _number(value: float | None, spec: str = ".4g") -> str:
    return "-" if value is None else format(value, spec)


def _learner_steps(learner: LearnerStats) -> str:
    steps = learner.steps
    where = escape(str(learner.path))
    if not learner.exists:
        return (
            f'<p class="note">No learner stats: there is no file at {where} (a learner writes one line per '
            f"policy version it publishes to {STATS_FILE} in its --checkpoint-dir; name that file with "
            "--learner-stats PATH).</p>"
        )
    if not steps:
        return f'<p class="note">The learner stats file {where} holds no step yet.</p>'
    charts = [
        _learner_chart("loss", steps, [("loss", "loss")]),
        _learner_chart(
            "policy-gradient and clip fraction", steps,
            [("pg fraction", "pg_fraction"), ("clip fraction", "clip_fraction")], y_range=(0.0, 1.0),
        ),
        _learner_chart("approximate KL to the behaviour policy", steps, [("KL (k3)", "approx_kl")]),
        _learner_chart("entropy", steps, [("entropy", "entropy")], unit=" nats"),
        _learner_chart("gradient norm (before clipping)", steps, [("grad norm", "grad_norm")]),
        _learner_chart(
            "advantages", steps,
            [("mean", "advantage_mean"), ("std", "advantage_std"), ("min", "advantage_min"),
             ("max", "advantage_max")],
        ),
        _learner_chart("tokens trained", steps, [("response tokens", "tokens")], unit=" tokens"),
        _learner_chart(
            "rollout/learner log-prob gap per token", steps, [("mean", "gap_mean"), ("max", "gap_max")],
            unit=" nats",
        ),
        _learner_chart("step time", steps, [("every pass", "seconds")], unit=" s"),
    ]  # fmt: skip
    histogram = staleness_histogram(steps)
    charts.append(
        bar_chart(
            "staleness of trained trajectories",
            [(str(lag), float(count)) for lag, count in histogram.items()],
            x_label="policy versions behind when trained",
            unit=" trajectories",
            empty=NOT_RECORDED,
        )
    )
    shown = steps[-LEARNER_ROWS:]
    rows = [
        [
            f"v{step.version}",
            str(step.trajectories),
            _number(step.loss),
            _number(step.approx_kl),
            _number(step.clip_fraction, ".3f"),
            _number(step.grad_norm),
            _number(step.gap_mean),
            _number(step.gap_max),
            _number(step.seconds, ".2f"),
        ]
        for step in shown
    ]
    headers = ("version", "trajectories", "loss", "KL", "clip", "grad norm", "gap mean", "gap max", "seconds")
    which = (
        f"the last {len(shown)} of {len(steps)} steps" if len(shown) < len(steps) else f"{len(steps)} steps"
    )
    return (
        f'<p class="note">From {where}, {which}: one line per policy version the learner published. '
        "Per-token figures are of the step's last PPO pass; the log-prob gap is of its first, before the "
        "step changed the weights (the rollout/learner mismatch). Step time adds every pass.</p>"
        f'<div class="charts">{"".join(charts)}</div>' + _table(headers, rows)
    )


def _heldout(heldout: HeldOut) -> str:
    evaluations = heldout.evaluations
    curve = line_chart(
        "held-out pass rate by policy version",
        [("pass rate", [(float(e.policy_version), e.pass_rate) for e in evaluations])],
        x_label="policy version evaluated",
        x_prefix="v",
        y_range=(0.0, 1.0),
        width=520,
        height=240,
    )
    rows = [
        [e.label, f"v{e.policy_version}", f"{e.passed}/{e.episodes}", f"{e.pass_rate:.1%}"]
        for e in evaluations
    ]
    verdict = f'<p class="note">{escape(heldout.verdict)}.</p>' if heldout.verdict else ""
    return (
        f'<p class="note">From the demo summary {escape(str(heldout.path))}: the held-out tasks run with one '
        "policy version pinned, the same seeds for every version.</p>"
        f'<div class="charts">{curve}</div>{verdict}'
        + _table(("evaluation", "version", "passed", "pass rate"), rows)
    )


def _reward_parts(data: ReportData) -> str:
    """The outcome's share and each component's distribution; the reward configurations that composed
    the grades, in the order first seen."""
    charts = histogram_chart(
        "outcome reward", data.outcome_rewards, unit="reward", empty="no grade recorded"
    ) + "".join(
        histogram_chart(f"component {name}", values, unit="value before its weight", empty="none measured")
        for name, values in data.reward_components.items()
    )
    if not data.reward_configs:
        versions = '<p class="note">No grade names its reward configuration (graded before v4).</p>'
    else:
        changed = len(data.reward_configs) > 1
        note = "The configuration changed during the run." if changed else "One configuration throughout."
        rows = [[version[:16], str(count)] for version, count in data.reward_configs]
        versions = f'<p class="note">{note}</p>' + _table(("reward configuration", "grades"), rows)
    if not data.reward_components:
        charts += '<p class="note">No component was measured (the outcome rule alone).</p>'
    return f'<div class="charts">{charts}</div>{versions}'


def _training(learner: LearnerStats | None, heldout: HeldOut | None) -> list[str]:
    """The held-out and learner sections, each only when its source was given."""
    parts = []
    if heldout is not None:
        parts += ["<h2>Held-out pass rate by version</h2>", _heldout(heldout)]
    if learner is not None:
        parts += [f"<h2>Learner steps ({len(learner.steps)})</h2>", _learner_steps(learner)]
    return parts


def render_page(
    data: ReportData, query_base: str, *, learner: LearnerStats | None = None, heldout: HeldOut | None = None
) -> str:
    """The page; the learner's section when `learner` is given (it says so when the file is not there), the
    held-out section when `heldout` is."""
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
    charts_tokens = bar_chart(
        "policy tokens generated per second",
        [(str(minute), rate) for minute, rate in enumerate(data.tokens_per_second)],
        x_label="minutes since the run's first event",
        unit=" tokens/s",
        empty="no action proposed",
    )
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
            f'<div class="charts">{charts_rewards}{charts_rate}{charts_tokens}</div>',
            "<h2>Reward parts</h2>",
            '<p class="note">Each grade\'s outcome share and the components it recorded apart '
            "(actors/tasks/reward_config.py); a component is recorded whatever its weight.</p>",
            _reward_parts(data),
            *_training(learner, heldout),
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
