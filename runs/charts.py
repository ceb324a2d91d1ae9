"""Server-rendered SVG charts (no JavaScript): shard durations, trends of tests passing."""

from collections.abc import Sequence
from dataclasses import dataclass
from html import escape

from django.utils.safestring import SafeString, mark_safe


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
    for share in (0, 50, 100):
        y = top + plot_h * (1 - share / 100)
        parts.append(
            f'<line x1="{left}" y1="{y:.1f}" x2="{width - right}" y2="{y:.1f}" stroke="#d0d7de"/>'
            f'<text x="{left - 4}" y="{y + 4:.1f}" font-size="10" text-anchor="end" '
            f'fill="#5c6670">{share}%</text>'
        )
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
