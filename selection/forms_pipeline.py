from crcr_reuse.schema import NAME_FORM
from django import forms

from runs.models import Backend


class EnableOperatorForm(forms.Form):
    backend = forms.SlugField()
    op = forms.CharField(max_length=200, help_text="aten operator, e.g. lgamma")

    def clean_op(self) -> str:
        op = self.cleaned_data["op"].strip().removeprefix("aten::")
        if not NAME_FORM.fullmatch(op):
            raise forms.ValidationError(f"{op!r} is not an operator name")
        return op


class OperatorFilterForm(forms.Form):
    """The operators page's search: a name, the backend whose support is shown, a filter."""

    q = forms.CharField(required=False, max_length=200, label="Operator")
    backend = forms.ModelChoiceField(
        queryset=Backend.objects.order_by("slug"),
        to_field_name="slug",
        required=False,
        empty_label=None,
    )
    show = forms.ChoiceField(
        required=False,
        choices=[("", "all"), ("waiting", "with tests waiting"), ("supported", "supported")],
    )

    def clean_q(self) -> str:
        return str(self.cleaned_data["q"]).strip().removeprefix("aten::")
