"""Server-rendered SVG charts (no JavaScript): shard durations, pass-rate trends."""

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
