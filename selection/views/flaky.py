"""The flaky tests page: tests that passed only on a retry, with their quarantine proposals."""

from django.conf import settings
from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from selection import flaky
from selection.forms import FlakyFilterForm


@login_required
def flaky_list(request: HttpRequest) -> HttpResponse:
    form = FlakyFilterForm(request.GET)
    days, backend = form.choice()
    tests, count = flaky.listed(days, backend)
    context = {
        "form": form,
        "days": days,
        "tests": tests,
        "count": count,
        "shown": flaky.SHOWN,
        "quarantine_runs": settings.CRCR_QUARANTINE_FLAKY_RUNS,
        "quarantine_window": settings.CRCR_QUARANTINE_WINDOW,
        "nav": "flaky",
    }
    return render(request, "selection/flaky_list.html", context)
