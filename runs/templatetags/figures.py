"""How the summary page writes its figures: a time span in words."""

from datetime import timedelta

from django import template

from runs.hud_cells import duration_text

register = template.Library()


@register.filter
def span(value: timedelta | None) -> str:
    """A time span as a person reads it: `42 s`, `7 min 05 s`, `2 h 03 min`; `—` for none."""
    if value is None:
        return "—"
    return duration_text(value)
