from django import forms

from selection.reuse.schema import NAME_FORM


class EnableOperatorForm(forms.Form):
    backend = forms.SlugField()
    op = forms.CharField(max_length=200, help_text="aten operator, e.g. lgamma")

    def clean_op(self) -> str:
        op = self.cleaned_data["op"].strip().removeprefix("aten::")
        if not NAME_FORM.fullmatch(op):
            raise forms.ValidationError(f"{op!r} is not an operator name")
        return op
