import json
import re
from typing import Any

from crcr_reuse.yaml_limits import MAX_BYTES
from django import forms
from django.db import connection, models
from django.db.models import Exists, OuterRef, Q, QuerySet, Subquery

from runs.forms import WindowForm
from runs.models import Backend
from selection import fates, flaky
from selection.models import OpUsage, Proposal, SelectionRun, UpstreamTest


class ReviewForm(forms.Form):
    decision = forms.ChoiceField(choices=[("approve", "approve"), ("reject", "reject")])
    # Where a decision made without htmx returns: the queue, or the proposal's own page.
    back = forms.ChoiceField(
        required=False, choices=[("", "queue"), ("proposal", "proposal")], widget=forms.HiddenInput
    )


def _any(choices: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [("", "any"), *choices]


class QueueFilterForm(forms.Form):
    """The review queue's filters and sort order (GET parameters)."""

    SORTS = {
        "test": ("file_path", "class_name", "test_name", "pk"),
        "newest": ("-created_at", "-pk"),
        "status": ("status", "file_path", "class_name", "test_name", "pk"),
        "mode": ("mode", "file_path", "class_name", "test_name", "pk"),
        "stage": ("stage", "file_path", "class_name", "test_name", "pk"),
    }

    q = forms.CharField(required=False, max_length=200, label="Search")
    backend = forms.SlugField(required=False, max_length=50)
    file = forms.CharField(required=False, max_length=300)
    klass = forms.CharField(required=False, max_length=200, label="Class")
    op = forms.CharField(required=False, max_length=200, label="Operator")
    dtype = forms.CharField(required=False, max_length=50)
    mode = forms.ChoiceField(required=False, choices=_any(Proposal.Mode.choices))
    stage = forms.ChoiceField(required=False, choices=_any(Proposal.Stage.choices))
    status = forms.ChoiceField(required=False, choices=_any(Proposal.Status.choices))
    sort = forms.ChoiceField(required=False, choices=[(key, key) for key in SORTS])
    # The proposals one selection run made (its page's and the operators page's links):
    # no control of its own, the queue names the run instead.
    run = forms.UUIDField(required=False, widget=forms.HiddenInput)

    # Filters a reviewer rarely sets: folded under "More filters" on the queue.
    MORE = ("backend", "file", "klass", "dtype", "stage")
    HIDDEN = ("run",)

    def main_fields(self) -> list[forms.BoundField]:
        return [self[name] for name in self.fields if name not in self.MORE + self.HIDDEN]

    def more_fields(self) -> list[forms.BoundField]:
        return [self[name] for name in self.MORE]

    def more_set(self) -> int:
        """How many of the folded filters the request sets (the fold opens when any is)."""
        return sum(1 for name in self.MORE if self.data.get(name))

    def clean_op(self) -> str:
        return self.cleaned_data["op"].strip().removeprefix("aten::")

    def filter(self, proposals: QuerySet[Proposal]) -> QuerySet[Proposal]:
        """The proposals matching the cleaned filters, in the chosen order."""
        data = self.cleaned_data
        if data.get("backend"):
            # The backend's id as a value (an InitPlan), not a join: joined, PostgreSQL
            # cannot walk the proposals' index in the page's order and sorts every match.
            slug = Backend.objects.filter(slug=data["backend"]).values("pk")[:1]
            proposals = proposals.filter(backend=Subquery(slug))
        for name in ("mode", "stage", "status"):
            if data.get(name):
                proposals = proposals.filter(**{name: data[name]})
        if data.get("run"):  # the run's id as a value, as the backend's above
            run = SelectionRun.objects.filter(uuid=data["run"]).values("pk")[:1]
            proposals = proposals.filter(selection_run=Subquery(run))
        if data.get("file"):  # part of a path, as a reviewer pastes it from a log
            paths = paths_containing(data["file"], data.get("backend") or None)
            proposals = proposals.filter(file_path__in=paths) if paths else proposals.none()
        if data.get("klass"):
            proposals = proposals.filter(class_name__icontains=data["klass"])
        if data.get("op"):
            proposals = proposals.filter(_uses_op(data["op"]))
        if data.get("dtype"):
            proposals = proposals.filter(_named(data["dtype"]))
        if data.get("q"):
            words = Q()
            for field in ("file_path", "class_name", "test_name", "reason"):
                words |= Q(**{f"{field}__icontains": data["q"]})
            proposals = proposals.filter(words | _named_test(data["q"]))
        return proposals.order_by(*self.SORTS[data.get("sort") or "test"])


def _named_test(text: str) -> Q:
    """Proposals about the generic test a test id names in any of its forms, as a run names
    it (`TestFooPRIVATEUSE1::test_bar_privateuseone_float32`) included (`fates.resolve`)."""
    named = Q()
    for key in fates.resolve(fates.parse(text))[:50]:
        named |= Q(file_path=key.file_path, class_name=key.class_name, test_name=key.test_name)
    return named


# Each backend's distinct file paths, one index probe a path (a skip scan of the
# (backend, file, class, test) index), however many proposals each path has.
_PATHS = """
WITH RECURSIVE paths(backend_id, path) AS (
    SELECT b.id, (SELECT MIN(p.file_path) FROM {proposal} p WHERE p.backend_id = b.id)
    FROM {backend} b WHERE %s IS NULL OR b.slug = %s
  UNION ALL
    SELECT paths.backend_id, (
        SELECT MIN(p.file_path) FROM {proposal} p
        WHERE p.backend_id = paths.backend_id AND p.file_path > paths.path
    ) FROM paths WHERE paths.path IS NOT NULL
)
SELECT DISTINCT path FROM paths WHERE path IS NOT NULL
"""


def paths_containing(part: str, backend: str | None = None) -> list[str]:
    """The proposals' file paths (of the backend with slug `backend`, else of all) that
    contain `part` in any case, as `icontains` matches them.

    A partial match cannot use an index: over the proposals it read every row (200,000
    rows, 190 ms, bench/pages_at_scale.py). Over the distinct paths, a few hundred at
    most, it leaves an equality the (backend, status, file) index serves.
    """
    sql = _PATHS.format(
        proposal=connection.ops.quote_name(Proposal._meta.db_table),
        backend=connection.ops.quote_name(Backend._meta.db_table),
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [backend, backend])
        found = [path for (path,) in cursor.fetchall()]
    wanted = part.upper()
    return sorted(path for path in found if wanted in path.upper())


def _uses_op(name: str) -> Q:
    """Proposals whose test uses the operator `name` (a packet, `add`, or an overload,
    `add.Tensor`): as the operator index recorded it (any overload), as an OpInfo the
    inventory found it spans, or as the evidence and edits name it (unsupported ops)."""
    test = {"class_name": OuterRef("class_name"), "test_name": OuterRef("test_name")}
    # Per row, served by the index opusage_by_test (file, class, test).
    called = OpUsage.objects.filter(
        Q(op=name) | Q(op__startswith=f"{name}."), file_path=OuterRef("file_path"), **test
    )
    spanned = UpstreamTest.objects.filter(
        _names(name, "ops"), file__path=OuterRef("file_path"), **test
    )
    return _named(name, overload=True) | Exists(called) | Exists(spanned)


def _named(name: str, overload: bool = False) -> Q:
    """Proposals whose evidence or edits name `name` as a whole string (or, for an op, as
    `name.<overload>`), in any case: `Proposal.names`, their JSON text lower-cased, holds
    `"add"` or `"add.Tensor`, not `"addmm"`."""
    quoted = json.dumps(name).lower()
    match = Q(names__contains=quoted)
    return match | Q(names__contains=f"{quoted[:-1]}.") if overload else match


def _names(name: str, field: str) -> Q:
    """A JSON field that names `name` as a whole string, in any case (`"add"` matches,
    `"addmm"` does not), for tables without a lower-cased text of their names as
    `Proposal.names`: a case-insensitive regular expression over the field's JSON text."""
    return Q(**{f"{field}__iregex": re.escape(json.dumps(name)[:-1]) + '"'})


class ProposalEditForm(forms.Form):
    mode = forms.ChoiceField(choices=Proposal.Mode.choices)
    reason = forms.CharField(
        max_length=500, strip=True, error_messages={"required": "a reason is required"}
    )

    def clean_reason(self) -> str:
        reason = " ".join(self.cleaned_data["reason"].split())
        if not reason:
            raise forms.ValidationError("a reason is required")
        return reason


class ConfigRevisionForm(forms.Form):
    """The revision of the config PR the page showed: an action names the text it was on."""

    revision = forms.RegexField(
        regex=r"\A[0-9a-f]{64}\Z",
        error_messages={"invalid": "a revision is 64 lowercase hexadecimal characters"},
        widget=forms.HiddenInput,
    )


class ConfigApprovalForm(ConfigRevisionForm):
    comment = forms.CharField(required=False, max_length=2000, widget=forms.Textarea)


class TextAreaField(forms.CharField):
    """A textarea's text with its line breaks as the browser counted them: a browser counts
    a break as one character against `maxlength` and sends it as two (CR LF)."""

    def to_python(self, value: Any) -> Any:
        value = super().to_python(value)
        return value.replace("\r\n", "\n") if isinstance(value, str) else value


class ConfigCommentForm(forms.Form):
    body = TextAreaField(
        max_length=5000,
        widget=forms.Textarea,
        label="Comment",
        error_messages={
            "required": "a comment needs some text",
            "max_length": "a comment is at most 5000 characters; this one has %(show_value)s",
        },
    )


class OpenChangeForm(forms.Form):
    backend = forms.SlugField(max_length=50)


class ConfigViewForm(forms.Form):
    """The config page's GET parameters: which version (`?v=N`), from which line its text is
    shown (`?start=N`) and how a diff is laid out."""

    v = forms.IntegerField(required=False, min_value=1, label="Version")
    # A long config is shown a window of lines at a time (`configpage.LINES_SHOWN`).
    start = forms.IntegerField(required=False, min_value=1, label="First line")
    view = forms.ChoiceField(
        required=False, choices=[("unified", "unified"), ("split", "split")], label="Diff view"
    )


def https_urls(field: models.Field, **kwargs: Any) -> forms.Field | None:
    """A model URL field's form field reads a bare host as https (Django 6's default)."""
    if isinstance(field, models.URLField):
        kwargs["assume_scheme"] = "https"
    return field.formfield(**kwargs)


class OnboardingForm(forms.ModelForm):
    """A backend's profile and its first config file (the admin-only onboarding page)."""

    config = forms.FileField(label="First config file", help_text="crcr or Torch Spyre YAML")
    config_format = forms.ChoiceField(
        label="Config format",
        choices=[("crcr", "crcr (as it is)"), ("spyre", "Torch Spyre (imported)")],
    )

    class Meta:
        model = Backend
        fields = [
            "slug", "name", "repository", "device_module", "health_probe", "version",
            "tracked_release", "participation", "relay_url", "relay_mode", "relay_sender",
            "relay_token",
        ]  # fmt: skip
        formfield_callback = https_urls

    def clean_config(self) -> Any:
        """A file past the YAML size limit is refused before it is read."""
        upload = self.cleaned_data["config"]
        if upload.size > MAX_BYTES:
            raise forms.ValidationError(
                f"YAML limit: the config file is {upload.size:,} bytes, over the limit of "
                f"{MAX_BYTES:,} bytes (MAX_BYTES)"
            )
        return upload

    def profile(self) -> dict[str, object]:
        return {name: self.cleaned_data[name] for name in self.Meta.fields}

    @classmethod
    def as_submitted(cls, profile: dict[str, object], config_format: str) -> "OnboardingForm":
        """The form as an admin sent it, bound again but for its file (a browser never
        fills a file input): the page of a refused check shows it with the problems."""
        form = cls(profile | {"config_format": config_format})
        form.is_valid()
        form.errors.pop("config", None)  # "required": the file was sent, and checked
        return form


class FlakyFilterForm(WindowForm):
    """The flaky tests page's window and backend (GET parameters)."""

    DEFAULT_DAYS = 7
    days = forms.TypedChoiceField(
        label="Time range", coerce=int, required=False,
        choices=[(days, "last 24 hours" if days == 1 else f"last {days} days")
                 for days in flaky.WINDOWS],
    )  # fmt: skip


class TestSearchForm(forms.Form):
    """The header's test search: a test id in any of its forms, or a config's name pattern."""

    __test__ = False  # not a pytest test class

    q = forms.CharField(required=False, max_length=500, label="Find a test", strip=True)
