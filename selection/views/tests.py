"""A test's page, found from the header's search: per backend, what its config decides for
the test and why (with the line and its blame), the decisions about it, its last outcomes."""

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from runs.models import Backend
from selection import fates
from selection.forms import TestSearchForm

TESTS_SHOWN = 20  # of the tests a query names (a config's regex may name hundreds)


@login_required
def test_search(request: HttpRequest) -> HttpResponse:
    form = TestSearchForm(request.GET)
    context = {"form": form, "nav": "tests"}
    if not form.is_valid():
        return render(request, "selection/test_detail.html", context, status=400)
    text = form.cleaned_data["q"]
    if text:
        backends = list(Backend.objects.order_by("slug"))
        query = fates.parse(text)
        keys = fates.resolve(query) or fates.named_by_pattern(text, backends)
        found = fates.fates(keys[:TESTS_SHOWN], backends)
        context |= {
            "query": query,
            "tests": [(key, [f for f in found if f.key == key]) for key in keys[:TESTS_SHOWN]],
            "more": max(0, len(keys) - TESTS_SHOWN),
        }
    return render(request, "selection/test_detail.html", context)
