"""Charts drawn by hand as inline SVG: bars with a value axis, and histograms built on them.

No script and no external resource: each bar carries a `<title>` (the browser shows it on hover), every
text is escaped. The functions return SVG markup as a string; `histogram` is the pure binning.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from html import escape

WIDTH, HEIGHT = 520, 240
MARGIN_LEFT, MARGIN_RIGHT, MARGIN_TOP, MARGIN_BOTTOM = 56, 16, 28, 48
BAR_COLOR = "#3b6ea8"
NEGATIVE_COLOR = "#b5473a"
MAX_LABELS = 16


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

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" role="img" '
        f'aria-label="{escape(title)}">',
        f'<text x="8" y="18" class="title">{escape(title)}</text>',
    ]
    ticks = round((high - low) / step)
    for index in range(ticks + 1):
        value = low + index * step
        at = y(value)
        parts.append(
            f'<line x1="{MARGIN_LEFT}" x2="{width - MARGIN_RIGHT}" y1="{at:.1f}" y2="{at:.1f}" class="grid"/>'
            f'<text x="{MARGIN_LEFT - 6}" y="{at + 4:.1f}" text-anchor="end" class="tick">'
            f"{_fmt(value)}</text>"
        )
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
