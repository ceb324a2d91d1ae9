"""How every page shows a state: `{% badge value label %}` (template library `states`).

A status (a run's, a proposal's, a config PR's, a test's outcome…) is a coloured badge,
one tone per meaning, so "merged" never reads as part of a PR's title. The review
queue's rows, written in Python, call `badge_html`.
"""

from html import escape

from django import template
from django.utils.safestring import SafeString, mark_safe

register = template.Library()

# Each state's tone: green done well, red failed or refused, amber under way or waiting,
# blue open for a decision, grey set aside. A state missing here is grey.
TONES = {
    **dict.fromkeys(
        ["passed", "done", "merged", "approved", "accepted", "delivered", "ready", "found",
         "recorded", "xfailed", "latest"],
        "green",
    ),
    **dict.fromkeys(
        ["failed", "error", "rejected", "refused", "timed_out", "crashed", "lost", "stopped",
         "regression", "xpassed"],
        "red",
    ),
    **dict.fromkeys(
        ["queued", "planning", "running", "pending", "sending", "building", "needs_rebase",
         "recheck", "flaky", "waiting"],
        "amber",
    ),
    "open": "blue",
}  # fmt: skip


def badge_html(value: str, label: str | None = None) -> str:
    """The badge's HTML (every text escaped): `<span class="badge badge-red status-failed">…`."""
    value = str(value)
    tone = TONES.get(value, "grey")
    text = value.replace("_", " ") if label is None else str(label)
    return f'<span class="badge badge-{tone} status-{escape(value)}">{escape(text)}</span>'


@register.simple_tag
def badge(value: str, label: str | None = None) -> SafeString:
    return mark_safe(badge_html(value, label))  # escaped by badge_html
