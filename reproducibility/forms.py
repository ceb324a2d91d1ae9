"""Forms of the reproducibility pages: every input passes one."""

from django import forms

from runs.models import TestResult


class BundleForm(forms.Form):
    include_artifacts = forms.BooleanField(
        required=False, label="Include the wheels instead of referencing them by hash"
    )


class AttemptFilterForm(forms.Form):
    outcome = forms.ChoiceField(
        required=False, choices=[("", "every outcome"), *TestResult.Outcome.choices]
    )


class TestLogForm(forms.Form):
    """Which test's log, and which of its attempts (else the one its failure names)."""

    test = forms.CharField(required=False, max_length=5000, strip=True)
    attempt = forms.IntegerField(required=False, min_value=1)


class ShardLogForm(forms.Form):
    """Which process output of the shard (its claim and process), which page, or the page
    of a test's failure."""

    claim = forms.IntegerField(required=False, min_value=1)
    process = forms.IntegerField(required=False, min_value=1)
    page = forms.IntegerField(required=False, min_value=1)
    test = forms.CharField(required=False, max_length=5000, strip=True)
