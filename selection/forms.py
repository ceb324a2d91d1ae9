from django import forms


class ReviewForm(forms.Form):
    decision = forms.ChoiceField(choices=[("approve", "approve"), ("reject", "reject")])
