"""Charts drawn by hand as inline SVG: bars with a value axis, histograms built on them, and lines (one or
more series over a numeric x axis, e.g. a figure by policy version).

No script and no external resource: each bar carries a `<title>` (the browser shows it on hover), every
text is escaped. The functions return SVG markup as a string; `histogram` is the pure binning.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from html import escape

WIDTH, HEIGHT = 520, 240
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 56, 16, 28, 48
BAR_COLOR = "#3b6ea8"
NEGATIVE_COLOR = "#b5473a"
MAX_LABELS = 16
SMALL_WIDTH, SMALL_HEIGHT = 340, 210  # a line chart among many (one per learner figure)
SERIES_COLORS = ("#3b6ea8", "#d08a2e", "#4f9a5a", "#b5473a", "#7a5ba8")
# Above this many points a series is drawn as a line alone: a hoverable marker per point would make a page
# of a long run (hundreds of versions, a dozen charts) megabytes heavy for marks nobody can aim at.
MAX_MARKERS = 120


def nice_step(span: float, ticks: int = 5) -> float:
    """A round tick step (1, 2 or 5 times a power of ten) that splits `span` in about `ticks` parts."""
    if span <= 0 or not math.isfinite(span):
        return 1.0
    raw = span / ticks
    power = 10 ** math.floor(math.log10(raw))
    for factor in (1, 2, 5, 10):
        if raw <= factor * power:
            return float(factor * power)
    return float(10 * power)


def _fmt(value: float) -> str:
    return f"{value:.3g}"


def empty_chart(title: str, message: str, width: int = WIDTH, height: int = 80) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
        f'aria-label="{escape(title)}"><text x="8" y="20" class="title">{escape(title)}</text>'
        f'<text x="8" y="50" class="note">{escape(message)}</text></svg>'
    )


def bar_chart(
    title: str,
    bars: Sequence[tuple[str, float]],
    *,
    unit: str = "",
    x_label: str = "",
    empty: str = "no data",
    tips: Sequence[str] | None = None,
    width: int = WIDTH,
    height: int = HEIGHT,
) -> str:
    """Vertical bars (label, value) on a value axis that includes zero (negative values go below it);
    `tips` (one per bar) replaces the label in the text shown on hover."""
    if not bars:
        return empty_chart(title, empty, width)
    values = [value for _, value in bars]
    low, high = min(0.0, *values), max(0.0, *values)
    step = nice_step(high - low or 1.0)
    low, high = math.floor(low / step) * step, math.ceil(high / step) * step
    if high == low:
        high = low + step
    plot_w = width - MARGIN_LEFT - MARGIN_RIGHT
    plot_h = height - MARGIN_TOP - MARGIN_BOTTOM

    def y(value: float) -> float:
        return MARGIN_TOP + plot_h * (high - value) / (high - low)

    parts = [*_frame(title, width, height), *_value_grid(low, high, step, y, width)]
    slot = plot_w / len(bars)
    every = max(1, math.ceil(len(bars) / MAX_LABELS))
    zero = y(0.0)
    for index, (label, value) in enumerate(bars):
        x = MARGIN_LEFT + index * slot + slot * 0.1
        top, bottom = min(y(value), zero), max(y(value), zero)
        color = NEGATIVE_COLOR if value < 0 else BAR_COLOR
        parts.append(
            f'<rect x="{x:.1f}" y="{top:.1f}" width="{slot * 0.8:.1f}" height="{max(bottom - top, 0.5):.1f}" '
            f'fill="{color}"><title>{escape(tips[index] if tips else label)}: {_fmt(value)}{escape(unit)}'
            "</title></rect>"
        )
        if index % every == 0:
            parts.append(
                f'<text x="{x + slot * 0.4:.1f}" y="{height - MARGIN_BOTTOM + 16}" text-anchor="middle" '
                f'class="tick">{escape(label)}</text>'
            )
    parts.append(
        f'<line x1="{MARGIN_LEFT}" x2="{width - MARGIN_RIGHT}" y1="{zero:.1f}" y2="{zero:.1f}" class="axis"/>'
    )
    if x_label or unit:
        parts.append(
            f'<text x="{MARGIN_LEFT + plot_w / 2:.1f}" y="{height - 8}" text-anchor="middle" class="note">'
            f"{escape(x_label)}{' (values in ' + escape(unit.strip()) + ')' if unit.strip() else ''}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)


def _frame(title: str, width: int, height: int) -> list[str]:
    """A chart's opening tag and title (the caller closes the svg)."""
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
        f'aria-label="{escape(title)}">',
        f'<text x="8" y="18" class="title">{escape(title)}</text>',
    ]


def _value_grid(low: float, high: float, step: float, y: Callable[[float], float], width: int) -> list[str]:
    """A grid line and a label at every `step` of the value axis from `low` to `high`."""
    lines = []
    for index in range(round((high - low) / step) + 1):
        value = low + index * step
        at = y(value)
        lines.append(
            f'<line x1="{MARGIN_LEFT}" x2="{width - MARGIN_RIGHT}" y1="{at:.1f}" y2="{at:.1f}" class="grid"/>'
            f'<text x="{MARGIN_LEFT - 6}" y="{at + 4:.1f}" text-anchor="end" class="tick">'
            f"{_fmt(value)}</text>"
        )
    return lines


def histogram(values: Sequence[float], bins: int = 20) -> list[tuple[float, float, int]]:
    """(low, high, count) per bin over [min, max]; the last bin includes its upper edge."""
    if not values:
        return []
    low, high = min(values), max(values)
    if high == low:
        return [(low, high, len(values))]
    width = (high - low) / bins
    counts = [0] * bins
    for value in values:
        counts[min(int((value - low) / width), bins - 1)] += 1
    return [(low + i * width, low + (i + 1) * width, count) for i, count in enumerate(counts)]


def histogram_chart(
    title: str, values: Sequence[float], *, unit: str, bins: int = 20, empty: str = ""
) -> str:
    """A histogram as bars labelled by each bin's lower edge; hovering a bar gives its range."""
    binned = histogram(values, bins)
    return bar_chart(
        title,
        [(_fmt(low), float(count)) for low, _, count in binned],
        tips=[f"{_fmt(low)} to {_fmt(high)} {unit}" for low, high, _ in binned],
        x_label=f"{unit}, lower edge of each bin (n={len(values)})",
        empty=empty or "no data",
    )


Series = tuple[str, Sequence[tuple[float, float]]]  # a name, and its (x, y) points in x order


def line_chart(
    title: str,
    series: Sequence[Series],
    *,
    unit: str = "",
    x_label: str = "",
    x_prefix: str = "",
    empty: str = "no data",
    include_zero: bool = True,
    y_range: tuple[float, float] | None = None,
    width: int = SMALL_WIDTH,
    height: int = SMALL_HEIGHT,
) -> str:
    """Each series as a line with a marker per point (hovering one shows "name, {x_prefix}x: y unit"), a
    legend when there are several. The value axis spans the points (and zero, with `include_zero`), or at
    least `y_range`. A point whose y is not finite (a NaN loss) is left out and counted in a note: the
    line must not pretend it was there."""
    drawn = [
        (name, [(x, y) for x, y in points if math.isfinite(x) and math.isfinite(y)])
        for name, points in series
    ]
    left_out = sum(len(points) for _, points in series) - sum(len(points) for _, points in drawn)
    xs = [x for _, points in drawn for x, _ in points]
    ys = [y for _, points in drawn for _, y in points]
    if not xs:
        return empty_chart(title, empty if not left_out else f"{left_out} values, none finite", width)
    low, high = min(ys), max(ys)
    if include_zero:
        low, high = min(low, 0.0), max(high, 0.0)
    if y_range is not None:
        low, high = min(low, y_range[0]), max(high, y_range[1])
    step = nice_step(high - low or abs(high) or 1.0)
    low, high = math.floor(low / step) * step, math.ceil(high / step) * step
    if high == low:
        high = low + step
    x_low, x_high = min(xs), max(xs)
    if x_high == x_low:  # one x: centre it
        x_low, x_high = x_low - 1, x_high + 1
    legend = len(drawn) > 1
    top = MARGIN_TOP + (14 if legend else 0)
    plot_w = width - MARGIN_LEFT - MARGIN_RIGHT
    plot_h = height - top - MARGIN_BOTTOM

    def at_x(value: float) -> float:
        return MARGIN_LEFT + plot_w * (value - x_low) / (x_high - x_low)

    def at_y(value: float) -> float:
        return top + plot_h * (high - value) / (high - low)

    parts = [*_frame(title, width, height), *_value_grid(low, high, step, at_y, width)]
    # x ticks at round steps; a step under 1 only when the x values themselves are fractional
    whole = all(float(x).is_integer() for x in xs)
    x_step = nice_step(x_high - x_low)
    if whole:
        x_step = max(1.0, math.ceil(x_step))

    def x_text(value: float) -> str:  # whole x values (versions) in full: 1000, not 1e+03
        return str(int(value)) if whole else _fmt(value)

    first = math.ceil(x_low / x_step)
    for index in range(first, math.floor(x_high / x_step + 1e-9) + 1):
        tick = index * x_step
        parts.append(
            f'<text x="{at_x(tick):.1f}" y="{height - MARGIN_BOTTOM + 16}" text-anchor="middle" class="tick">'
            f"{escape(x_prefix)}{x_text(tick)}</text>"
        )
    if low < 0 < high:
        zero = at_y(0.0)
        parts.append(
            f'<line x1="{MARGIN_LEFT}" x2="{width - MARGIN_RIGHT}" y1="{zero:.1f}" y2="{zero:.1f}" '
            'class="axis"/>'
        )
    legend_x = MARGIN_LEFT
    for index, (name, points) in enumerate(drawn):
        color = SERIES_COLORS[index % len(SERIES_COLORS)]
        if legend:
            parts.append(
                f'<rect x="{legend_x}" y="{MARGIN_TOP - 2}" width="10" height="3" fill="{color}"/>'
                f'<text x="{legend_x + 14}" y="{MARGIN_TOP + 3}" class="tick">{escape(name)}</text>'
            )
            legend_x += 24 + 6 * len(name)
        if not points:
            continue
        line = " ".join(f"{at_x(x):.1f},{at_y(y):.1f}" for x, y in points)
        parts.append(f'<polyline points="{line}" fill="none" stroke="{color}" stroke-width="1.5"/>')
        if len(points) <= MAX_MARKERS:
            parts.extend(
                f'<circle cx="{at_x(x):.1f}" cy="{at_y(y):.1f}" r="2.5" fill="{color}"><title>'
                f"{escape(name)}, {escape(x_prefix)}{x_text(x)}: {_fmt(y)}{escape(unit)}</title></circle>"
                for x, y in points
            )
    note = x_label + (f" (values in {unit.strip()})" if unit.strip() else "")
    if left_out:
        note += f"; {left_out} non-finite values not drawn"
    if note:
        parts.append(
            f'<text x="{MARGIN_LEFT + plot_w / 2:.1f}" y="{height - 8}" text-anchor="middle" class="note">'
            f"{escape(note)}</text>"
        )
    parts.append("</svg>")
    return "".join(parts)
