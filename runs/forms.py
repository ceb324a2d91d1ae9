import re
from typing import Any

from django import forms

from runs import metrics
from runs.models import Backend
from runs.triggers import TriggerError, label_selection
from runs.upstream import SHA_RE

RELEASE_RE = re.compile(r"^release/\d+\.\d+$")


class TriggerForm(forms.Form):
    """A release branch or a manual SHA to build for one backend."""

    backend = forms.ModelChoiceField(queryset=Backend.objects.all(), to_field_name="slug")
    kind = forms.ChoiceField(choices=[("release", "release branch"), ("manual", "manual SHA")])
    target = forms.CharField(
        max_length=100, help_text="release/X.Y for a release, a 40-hex SHA for a manual run"
    )
    labels = forms.CharField(
        max_length=200, required=False,
        help_text="run only the tests these labels select, as Torch Spyre's TEST_TYPE "
        "(smoke, core, suite_GROUP, a config label; comma-separated); empty: all",
    )  # fmt: skip

    def clean(self) -> dict:
        data = super().clean() or {}
        target = (data.get("target") or "").strip()
        kind = data.get("kind")
        if kind == "release" and not RELEASE_RE.match(target):
            self.add_error("target", f"{target!r} is not a release branch (release/X.Y)")
        if kind == "manual" and not SHA_RE.match(target):
            self.add_error("target", f"{target!r} is not a 40-hex commit SHA")
        data["target"] = target
        try:
            data["labels"] = label_selection(data.get("labels") or "")
        except TriggerError as error:
            self.add_error("labels", str(error))
        return data


class HudFilterForm(forms.Form):
    """The HUD's filters and page, read from the query string."""

    job = forms.CharField(
        label="Job name contains", required=False, max_length=200, strip=True,
        widget=forms.TextInput(attrs={"placeholder": "e.g. acme", "type": "search"}),
    )  # fmt: skip
    failures = forms.BooleanField(label="Failures only", required=False)
    page = forms.IntegerField(min_value=1, max_value=10_000, required=False)

    def filters(self) -> dict:
        """The valid filters (an invalid page reads as the first)."""
        data = self.cleaned_data if self.is_valid() else {}
        return {
            "job": data.get("job") or "",
            "failures_only": bool(data.get("failures")),
            "page": data.get("page") or 1,
        }


class SummaryForm(forms.Form):
    """The summary's tab (pull requests or nightly) and window, read from the query string."""

    event = forms.ChoiceField(choices=list(metrics.EVENTS.items()), required=False)
    days = forms.TypedChoiceField(
        choices=[(days, days) for days in metrics.SUMMARY_DAYS], coerce=int, required=False
    )
    DEFAULT_DAYS = 7

    def choice(self) -> tuple[str, int]:
        """The tab and window asked for; an invalid one reads as the default (and its
        error is shown beside the tabs)."""
        self.is_valid()  # a field in error is left out of cleaned_data
        data = self.cleaned_data
        return data.get("event") or "pr", data.get("days") or self.DEFAULT_DAYS


class WindowForm(forms.Form):
    """A page's window and backend, read from the query string (metrics, flaky tests)."""

    DEFAULT_DAYS = 30
    days = forms.TypedChoiceField(
        label="Time range", coerce=int, required=False,
        choices=[(days, f"last {days} days") for days in metrics.METRICS_DAYS],
    )  # fmt: skip
    backend = forms.ModelChoiceField(
        label="Backend", queryset=Backend.objects.order_by("slug"), to_field_name="slug",
        required=False, empty_label="every backend",
    )  # fmt: skip

    def __init__(self, data: Any) -> None:
        # The window shown when none is asked for is the one the select shows.
        super().__init__({"days": str(self.DEFAULT_DAYS), **data.dict()})

    def choice(self) -> tuple[int, str]:
        """The window and backend's slug asked for; an invalid one reads as the default
        (every backend, `DEFAULT_DAYS`) and its error is shown beside its control."""
        self.is_valid()  # a field in error is left out of cleaned_data
        backend = self.cleaned_data.get("backend")
        return self.cleaned_data.get("days") or self.DEFAULT_DAYS, backend.slug if backend else ""
