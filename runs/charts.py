"""Server-rendered SVG charts (no JavaScript): shard durations, trends of tests passing, and
daily series (the metrics page)."""

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from html import escape

from django.utils.safestring import SafeString, mark_safe

PERCENT_TICKS = ((0.0, "0%"), (0.5, "50%"), (1.0, "100%"))  # share of the height, label


@dataclass
class Bar:
    label: str
    estimated: float
    actual: float | None


def shard_durations(bars: Sequence[Bar], width: int = 640) -> SafeString:
    """Estimated (light) against actual (dark) seconds per shard, one row each."""
    if not bars:
        return mark_safe("")
    row, label_width, right = 22, 70, 60
    scale = max(max(b.estimated, b.actual or 0) for b in bars) or 1.0
    plot = width - label_width - right
    height = row * len(bars) + 24
    parts = [
        f'<svg class="chart" role="img" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" xmlns="http://www.w3.org/2000/svg">',
        "<title>Estimated and actual duration per shard</title>",
    ]
    for index, bar in enumerate(bars):
        y = index * row + 4
        estimated = plot * bar.estimated / scale
        parts.append(
            f'<text x="0" y="{y + 13}" font-size="12">{escape(bar.label)}</text>'
            f'<rect x="{label_width}" y="{y}" width="{estimated:.1f}" height="8" fill="#9ec5fe">'
            f"<title>estimated {bar.estimated:.0f} s</title></rect>"
        )
        if bar.actual is not None:
            actual = plot * bar.actual / scale
            parts.append(
                f'<rect x="{label_width}" y="{y + 9}" width="{actual:.1f}" height="8" '
                f'fill="#1f6feb"><title>actual {bar.actual:.0f} s</title></rect>'
                f'<text x="{label_width + max(actual, estimated) + 4:.1f}" y="{y + 15}" '
                f'font-size="11">{bar.actual:.0f} s</text>'
            )
    legend_y = height - 6
    parts.append(
        f'<text x="{label_width}" y="{legend_y}" font-size="11" fill="#5c6670">'
        "light: estimated · dark: actual (seconds)</text></svg>"
    )
    return mark_safe("".join(parts))


@dataclass
class Point:
    """One finished run of a job: its label and how many of its executed tests passed."""

    label: str
    passed: int
    executed: int
    current: bool = False

    @property
    def rate(self) -> float:
        return self.passed / self.executed if self.executed else 0.0


def pass_rate_trend(title: str, points: Sequence[Point], width: int = 320) -> SafeString:
    """A job's share of tests passing per run, oldest left, one marked point per run (0 to 100 %)."""
    if not points:
        return mark_safe("")
    height, left, right, top, bottom = 110, 36, 10, 20, 14
    plot_w, plot_h = width - left - right, height - top - bottom
    step = plot_w / (len(points) - 1) if len(points) > 1 else 0.0

    def xy(index: int, point: Point) -> tuple[float, float]:
        x = left + (index * step if len(points) > 1 else plot_w / 2)
        return x, top + plot_h * (1 - point.rate)

    coords = [xy(i, p) for i, p in enumerate(points)]
    parts = [
        f'<svg class="chart trend" role="img" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>Tests passing per run of {escape(title)}</title>",
        f'<text x="0" y="12" font-size="12">{escape(title)}</text>',
    ]
    _grid(parts, left, width - right, top, plot_h, PERCENT_TICKS)
    line = " ".join(f"{x:.1f},{y:.1f}" for x, y in coords)
    parts.append(f'<polyline points="{line}" fill="none" stroke="#1f6feb" stroke-width="1.5"/>')
    for (x, y), point in zip(coords, points, strict=True):
        fill = "#cf222e" if point.rate < 1 else "#1a7f37"
        ring = ' stroke="#000" stroke-width="2"' if point.current else ""
        parts.append(
            f'<circle class="point" cx="{x:.1f}" cy="{y:.1f}" r="{5 if point.current else 3.5}" '
            f'fill="{fill}"{ring}><title>{escape(point.label)}: {point.rate:.0%} of tests passing '
            f"({point.passed} of {point.executed})</title></circle>"
        )
    return mark_safe("".join(parts) + "</svg>")


@dataclass
class Series:
    """One line (or one bar a day) of a daily chart: a value per day, None for no value,
    and what hovering each day says."""

    label: str
    colour: str
    values: Sequence[float | None]
    notes: Sequence[str]


def _grid(
    parts: list[str],
    left: int,
    right: float,
    top: int,
    plot_h: int,
    ticks: Sequence[tuple[float, str]],
) -> None:
    """Horizontal grid lines at `ticks` (share of the height from the bottom, label)."""
    for share, label in ticks:
        y = top + plot_h * (1 - share)
        parts.append(
            f'<line x1="{left}" y1="{y:.1f}" x2="{right}" y2="{y:.1f}" stroke="#d0d7de"/>'
            f'<text x="{left - 4}" y="{y + 4:.1f}" font-size="10" text-anchor="end" '
            f'fill="#5c6670">{escape(label)}</text>'
        )


def daily(
    title: str, days: Sequence[date], series: Sequence[Series], percent: bool, width: int = 940
) -> SafeString:
    """Days left to right, oldest first: a line per series for a percentage (0 to 100 %),
    else side-by-side bars per day from 0 to the largest value; a legend of the series."""
    if not days:
        return mark_safe("")
    height, left, right, top, bottom = 150, 40, 10, 22, 18
    plot_w, plot_h = width - left - right, height - top - bottom
    slot = plot_w / len(days)
    values = [v for each in series for v in each.values if v is not None]
    scale = 100.0 if percent else float(max(values, default=0) or 1)
    parts = [
        f'<svg class="chart daily" role="img" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" xmlns="http://www.w3.org/2000/svg">',
        f"<title>{escape(title)}</title>",
        f'<text x="0" y="12" font-size="12" font-weight="600">{escape(title)}</text>',
    ]
    legend_x = width - right
    for each in reversed(series):
        legend_x -= 8 * len(each.label) + 24
        parts.append(
            f'<rect x="{legend_x}" y="4" width="10" height="10" fill="{each.colour}"/>'
            f'<text x="{legend_x + 14}" y="13" font-size="11">{escape(each.label)}</text>'
        )
    ticks = PERCENT_TICKS if percent else ((0.0, "0"), (1.0, f"{scale:.0f}"))
    _grid(parts, left, width - right, top, plot_h, ticks)
    for index in sorted({0, len(days) // 2, len(days) - 1}):
        x = left + slot * (index + 0.5)
        anchor = "end" if index == len(days) - 1 and index else "middle"
        parts.append(
            f'<text x="{min(x, width - right):.1f}" y="{height - 4}" font-size="10" '
            f'text-anchor="{anchor}" fill="#5c6670">{days[index]:%b %d}</text>'
        )
    for number, each in enumerate(series):
        if percent:
            parts += _line(each, left, slot, top, plot_h)
        else:
            bar = max(1.0, slot * 0.8 / len(series))
            for index, (value, note) in enumerate(zip(each.values, each.notes, strict=True)):
                if not value:
                    continue
                x = left + slot * index + slot * 0.1 + bar * number
                tall = plot_h * value / scale
                parts.append(
                    f'<rect class="point" x="{x:.1f}" y="{top + plot_h - tall:.1f}" '
                    f'width="{bar:.1f}" height="{tall:.1f}" fill="{each.colour}">'
                    f"<title>{escape(note)}</title></rect>"
                )
    return mark_safe("".join(parts) + "</svg>")


def _line(series: Series, left: int, slot: float, top: int, plot_h: int) -> list[str]:
    """A percentage's line through the days that have a value, a marked point each."""
    points = [
        (left + slot * (index + 0.5), top + plot_h * (1 - value / 100), note)
        for index, (value, note) in enumerate(zip(series.values, series.notes, strict=True))
        if value is not None
    ]
    parts = []
    if len(points) > 1:
        line = " ".join(f"{x:.1f},{y:.1f}" for x, y, _ in points)
        parts.append(
            f'<polyline points="{line}" fill="none" stroke="{series.colour}" stroke-width="1.5"/>'
        )
    for x, y, note in points:
        parts.append(
            f'<circle class="point" cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill="{series.colour}">'
            f"<title>{escape(note)}</title></circle>"
        )
    return parts
