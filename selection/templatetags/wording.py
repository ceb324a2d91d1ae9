"""Messages written for a terminal, shown on a page: `name` spans as code, never as backticks."""

import re

from django import template
from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

register = template.Library()

_SPAN = re.compile(r"`([^`\n]+)`")


@register.filter
def code_spans(text: object) -> SafeString:
    """`text` escaped, each `…` span in it as <code>…</code>."""
    return mark_safe(_SPAN.sub(r"<code>\1</code>", escape(str(text))))  # escaped first
