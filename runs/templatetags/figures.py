"""How the summary page writes its figures: a time span in words."""

from datetime import timedelta

from django import template

register = template.Library()


@register.filter
def span(value: timedelta | None) -> str:
    """A time span as a person reads it: `42 s`, `7 min 05 s`, `2 h 03 min`; `—` for none."""
    if value is None:
        return "—"
    seconds = max(0, round(value.total_seconds()))
    if seconds < 60:
        return f"{seconds} s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes} min {seconds:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"
