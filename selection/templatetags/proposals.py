"""The review queue's per-row rendering, in Python: a page has 25 rows and a template
node per evidence key costs more than the rest of the page (see bench/pages.py)."""

from functools import lru_cache
from typing import Any
from uuid import UUID

from django import template
from django.urls import get_script_prefix, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe
from django.utils.text import Truncator

register = template.Library()

_ANY_UUID = "00000000-0000-0000-0000-000000000000"


@lru_cache(maxsize=64)
def _pattern(name: str, prefix: str) -> str:
    return reverse(name, args=[_ANY_UUID])


@register.simple_tag
def uuid_url(name: str, uuid: UUID | str) -> str:
    """`{% url name uuid %}` for a page addressed by a UUID alone, one reverse() per name."""
    # reverse() is cached per name and script prefix: the UUID is the URL's only variable.
    return _pattern(name, get_script_prefix()).replace(_ANY_UUID, str(uuid))


def _codes(names: Any) -> SafeString:
    return format_html_join(", ", "<code>{}</code>", ((name,) for name in names))


def _joined(items: Any) -> str:
    return ", ".join(str(item) for item in items)


def _device(device: dict[str, Any]) -> SafeString:
    get = device.get
    xpassed = format_html(", {} xpassed", get("xpassed")) if get("xpassed") else ""
    summary = format_html(
        "<li>on the device: {} of {} passed, {} failed{}</li>",
        get("variants", ""), get("passed", ""), get("failed", ""), xpassed,
    )  # fmt: skip
    failures = [
        format_html(
            '<li><details><summary>{}{}{}: {}</summary><pre class="raw">{}</pre></details></li>',
            failure.get("category", ""),
            format_html(" · <code>{}</code>", failure["op"]) if failure.get("op") else "",
            format_html(" · {}", failure["dtype"]) if failure.get("dtype") else "",
            Truncator(str(failure.get("line", ""))).chars(160),
            failure.get("message", ""),
        )
        for failure in (get("failures") or [])[:2]
    ]
    return mark_safe(summary + "".join(failures))  # parts built by format_html


def _ci_run(seen: dict[str, Any]) -> SafeString:
    get = seen.get
    return format_html(
        '<li>in CI run <a href="{}">{}</a>: {} of {} variant(s) passed unexpectedly '
        "(listed {})</li>",
        uuid_url("runs:run_detail", get("run", "")), get("job", ""),
        get("unexpected_passes", ""), get("variants", ""), get("listed", ""),
    )  # fmt: skip


@register.filter
def evidence(ev: dict[str, Any]) -> SafeString:
    """A proposal's evidence as the queue's list: ops, dtypes, device outcome, CPU failure."""
    items: list[str] = []
    get = ev.get
    if get("unsupported_ops"):
        items.append(format_html("<li>unsupported ops: {}</li>", _codes(ev["unsupported_ops"])))
    if get("waiting_on"):
        items.append(format_html("<li>waiting on: {}</li>", _codes(ev["waiting_on"])))
    if get("ops_under_test") is not None:
        items.append(format_html(
            "<li>ops used: {} under test, {} helpers</li>", ev["ops_under_test"],
            get("helper_ops", ""),
        ))  # fmt: skip
    if get("dtypes"):
        supported = get("supported_dtypes")
        note = "" if supported is None else f" (supported: {_joined(supported) or 'none'})"
        items.append(format_html("<li>dtypes: {}{}</li>", _joined(ev["dtypes"]), note))
    if get("restrictions"):
        items.append(format_html("<li>restrictions: {}</li>", _joined(ev["restrictions"])))
    if get("stage1"):
        items.append(format_html("<li>stage 1: {}</li>", ev["stage1"]))
    if get("device"):
        items.append(_device(ev["device"]))
    if get("cpu_failure"):
        items.append(format_html(
            '<li><details><summary>failed on the CPU too</summary><pre class="raw">{}</pre>'
            "</details></li>", ev["cpu_failure"],
        ))  # fmt: skip
    if get("ci_run"):
        items.append(_ci_run(ev["ci_run"]))
    if get("flaky_history"):
        items.append(format_html("<li>flaky in {} recent run(s)</li>", len(ev["flaky_history"])))
    for key in sorted(set(ev) - SHOWN):  # anything else a stage recorded, in words
        items.append(format_html("<li>{}: {}</li>", key.replace("_", " "), _plain(ev[key])))
    return mark_safe(
        '<ul class="evidence">' + "".join(items) + "</ul>"
    )  # parts escaped by format_html


# Evidence keys `evidence` words itself; any other is listed as "key: value".
SHOWN = frozenset(
    {
        "unsupported_ops", "waiting_on", "ops_under_test", "helper_ops", "dtypes",
        "supported_dtypes", "restrictions", "stage1", "device", "cpu_failure", "flaky_history",
        "ci_run",
    }
)  # fmt: skip


def _plain(value: Any) -> str:
    """A value in words: lists joined with commas, mappings as `key value`, yes/no."""
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, dict):
        return "; ".join(f"{k.replace('_', ' ')} {_plain(v)}" for k, v in value.items())
    if isinstance(value, list | tuple):
        return ", ".join(_plain(item) for item in value) or "none"
    return "—" if value is None else str(value)


@register.filter
def edits(changes: dict[str, Any]) -> SafeString:
    """A proposal's edits, one line per kind: `ops: exclude <code>a</code>, <code>b</code>`."""
    lines = (
        format_html(
            "<br><small>{}: {}</small>",
            kind,
            mark_safe(
                "; ".join(
                    format_html("{} {}", way, _codes(item.get("name", "") for item in items))
                    for way, items in change.items()
                )
            ),
        )
        for kind, change in changes.items()
    )
    return mark_safe("".join(lines))  # parts escaped by format_html
