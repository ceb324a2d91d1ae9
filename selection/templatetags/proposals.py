"""The review queue's per-row rendering, in Python: a page has 25 rows and a template
node per evidence key costs more than the rest of the page (see bench/pages.py)."""

from functools import lru_cache
from html import escape
from typing import Any
from uuid import UUID

from django import forms, template
from django.forms import BoundField
from django.urls import get_script_prefix, reverse
from django.utils import dateformat, timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString, mark_safe

from crcr_site.lib.states import badge_html
from runs.excerpts import clip
from selection.models import Proposal

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
    return mark_safe(", ".join(f"<code>{escape(str(name))}</code>" for name in names))


def _joined(items: Any) -> str:
    return ", ".join(str(item) for item in items)


def _device(device: dict[str, Any]) -> SafeString:
    get = device.get
    xpassed = format_html(", {} passed unexpectedly", get("xpassed")) if get("xpassed") else ""
    variants = get("variants") or 0
    summary = format_html(
        "<li>on the device: {} of {} variant{} passed, {} failed{}</li>",
        get("passed") or 0, variants, "" if variants == 1 else "s", get("failed") or 0, xpassed,
    )  # fmt: skip
    failures = [
        format_html(
            '<li><details><summary>{}{}{}: {}</summary><pre class="raw">{}</pre></details></li>',
            failure.get("category", ""),
            format_html(" · <code>{}</code>", failure["op"]) if failure.get("op") else "",
            format_html(" · {}", failure["dtype"]) if failure.get("dtype") else "",
            clip(str(failure.get("line", "")), 160),
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
    # The keys every proposal has, in f-strings (every text escaped): format_html a key
    # was a third of a queue row's time.
    if get("unsupported_ops"):
        items.append(f"<li>unsupported ops: {_codes(ev['unsupported_ops'])}</li>")
    if get("waiting_on"):
        items.append(f"<li>waiting on: {_codes(ev['waiting_on'])}</li>")
    if get("ops_under_test") is not None:
        under, helpers = escape(str(ev["ops_under_test"])), escape(str(get("helper_ops", "")))
        items.append(f"<li>ops used: {under} under test, {helpers} helpers</li>")
    if get("dtypes"):
        supported = get("supported_dtypes")
        note = "" if supported is None else f" (supported: {_joined(supported) or 'none'})"
        items.append(f"<li>dtypes: {escape(_joined(ev['dtypes']) + note)}</li>")
    if get("restrictions"):
        items.append(f"<li>restrictions: {escape(_joined(ev['restrictions']))}</li>")
    if get("stage1"):
        items.append(f"<li>stage 1: {escape(str(ev['stage1']))}</li>")
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
    )  # parts escaped above or by format_html


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


def _described(proposal: Any) -> str:
    """What the backend's latest config says of each op, dtype or module the proposal's
    edits touch (`configdescriptions.attach`), linked to the line that says it (HTML)."""
    return "".join(
        f'<br><small class="described">{escape(kind)} <code>{escape(name)}</code>: '
        f'{escape(text)} <a href="{escape(url)}" title="{escape(where)}">(config)</a></small>'
        for kind, name, text, url, where in getattr(proposal, "described", ())
    )


def _when(value: Any) -> str:
    """`|date:"Y-m-d H:i"` in the current time zone."""
    return dateformat.format(timezone.localtime(value), "Y-m-d H:i") if value else ""


def _actions(proposal: Any, csrf_token: str) -> str:
    """The row's approve, reject and edit controls, or why it has none (HTML)."""
    if proposal.status == Proposal.Status.MERGED:
        return '<span class="muted">in the config</span>'
    if proposal.config_change_id:
        url = uuid_url("selection:configchange_detail", proposal.config_change.uuid)
        return f'<a href="{url}">in a config PR</a>'
    review_url = uuid_url("selection:proposal_review", proposal.uuid)
    edit_url = uuid_url("selection:proposal_edit", proposal.uuid)
    approve = '<button class="btn-primary" name="decision" value="approve">Approve</button>'
    reject = '<button class="btn-danger" name="decision" value="reject">Reject</button>'
    return (
        f'<form method="post" action="{review_url}" hx-post="{review_url}" '
        'hx-target="closest tr" hx-swap="outerHTML" data-decide>'
        f'<input type="hidden" name="csrfmiddlewaretoken" value="{escape(csrf_token)}">'
        f"{approve if proposal.status != Proposal.Status.APPROVED else ''}"
        f"{reject if proposal.status != Proposal.Status.REJECTED else ''}</form> "
        f'<a href="{edit_url}" hx-get="{edit_url}" hx-target="closest tr" hx-swap="outerHTML" '
        "data-edit>Edit</a>"
    )


MODES, STAGES, STATUSES = (
    dict(choices.choices) for choices in (Proposal.Mode, Proposal.Stage, Proposal.Status)
)


@register.simple_tag(takes_context=True)
def queue_row(context: Any, proposal: Any) -> SafeString:
    """A proposal's row of the queue, in one string (every text escaped here): through the
    template, the 25 rows of a page were half of its rendering (bench/pages.py), and
    format_html a third of the rest. `can_review` adds the actions."""
    p = proposal
    test = escape(f"{p.class_name}::{p.test_name}" if p.class_name else p.test_name)
    edited = (
        '<br><small class="edited-mark">edited by '
        f"{escape(p.edited_by or 'someone')}, {_when(p.edited_at)}</small>"
        if getattr(p, "edited_at", None) else ""
    )  # fmt: skip
    reviewed = (
        f'<br><small class="muted">{escape(p.reviewer.username)}, {_when(p.reviewed_at)}</small>'
        if p.reviewer_id and p.status != Proposal.Status.PENDING else ""
    )  # fmt: skip
    actions = (
        f"<td>{_actions(p, str(context.get('csrf_token', '')))}</td>"
        if context.get("can_review") else ""
    )  # fmt: skip
    status = escape(p.status)
    state = badge_html(p.status, STATUSES.get(p.status, p.status))
    return mark_safe(
        f'<tr id="proposal-{p.uuid}" class="proposal" tabindex="-1" data-status="{status}">'
        f"<td><code>{escape(p.file_path)}</code><br>"
        f'<a href="{uuid_url("selection:proposal_detail", p.uuid)}">{test}</a></td>'
        f"<td>{escape(MODES.get(p.mode, p.mode))}{edits(p.edits)}{_described(p)}{edited}</td>"
        f'<td class="reason"><div class="clamp">{escape(p.reason)}</div></td>'
        f"<td>{evidence(p.evidence)}</td>"
        f"<td>{escape(STAGES.get(p.stage, p.stage))}</td>"
        f'<td class="state">{state}{reviewed}</td>'
        f"{actions}</tr>"
    )


def _widget(field: BoundField) -> str:
    """A text input's or a select's HTML as Django's widget templates write it, without
    them and in f-strings (every text escaped): the queue's ten filters through the
    template engine cost half a trivial page, and through format_html a third of one."""
    widget = field.field.widget
    attrs = {**widget.attrs, **field.build_widget_attrs({}, widget)}
    if field.auto_id:
        attrs.setdefault("id", field.auto_id)
    name = escape(field.html_name)
    if type(widget) is forms.Select:
        chosen = widget.format_value(field.value())
        options = "".join(
            f'\n  <option value="{escape(str(value))}"'
            f"{' selected' if str(value) in chosen else ''}>{escape(str(label))}</option>\n"
            for value, label in widget.choices
        )
        return f'<select name="{name}"{_attrs(attrs)}>{options}\n</select>'
    if type(widget) is forms.TextInput:
        value = widget.format_value(field.value())
        shown = f' value="{escape(str(value))}"' if value is not None else ""
        return f'<input type="text" name="{name}"{shown}{_attrs(attrs)}>'
    return str(field.as_widget())


def _attrs(attrs: dict[str, Any]) -> str:
    """Attributes in their order, as django/forms/widgets/attrs.html writes them."""
    return "".join(
        f' {escape(name)}="{escape(str(value))}"' if value is not True else f" {escape(name)}"
        for name, value in attrs.items()
        if value is not False
    )


@register.simple_tag
def filter_fields(fields: list[BoundField]) -> SafeString:
    """`<label>{{ field.label }} {{ field }}</label>` for each of `fields`."""
    return mark_safe(  # every text escaped above
        "".join(f"<label>{escape(str(field.label))} {_widget(field)}</label>" for field in fields)
    )
