from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from runs.models import Run


@login_required
def hud(request: HttpRequest) -> HttpResponse:
    runs = Run.objects.select_related("trigger").order_by("-created_at")[:200]
    return render(request, "runs/hud.html", {"runs": runs, "nav": "hud"})


@login_required
def run_list(request: HttpRequest) -> HttpResponse:
    runs = Run.objects.select_related("trigger", "backend").order_by("-created_at")[:100]
    return render(request, "runs/run_list.html", {"runs": runs, "nav": "runs"})
