"""Every test's fate on the pages of other apps: the run page asks here what its config left
out (the runs app imports nothing of selection; its template loads this library)."""

from typing import Any

from django import template

from selection import fates

register = template.Library()


@register.simple_tag
def left_out_of(run: Any) -> fates.RunLeftOut | None:
    """Per file, the tests the run's config left out (`fates.left_out`)."""
    return fates.left_out(run)
