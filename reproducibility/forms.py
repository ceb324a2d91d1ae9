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
