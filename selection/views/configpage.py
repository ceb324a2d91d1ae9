"""A backend's config page: the current (or any) version's YAML, the versions, and blame.
The history is read in `confighistory`, diffs laid out in `configdiff`."""

from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseBadRequest
from django.shortcuts import get_object_or_404, render
from django.urls import reverse

from runs.models import Backend
from selection import configdiff, confighistory
from selection.forms import ConfigViewForm
from selection.models import ConfigVersion


def diff_view(request: HttpRequest) -> str:
    """`split` or `unified` (the default), from `?view=`; anything else reads as unified."""
    form = ConfigViewForm(request.GET)
    return "split" if form.is_valid() and form.cleaned_data["view"] == "split" else "unified"


def _page(request: HttpRequest, backend: Backend, number: int | None) -> HttpResponse:
    versions = list(confighistory.versions(backend))
    context = {"backend": backend, "versions": versions, "nav": "config"}
    if not versions:
        return render(request, "selection/backendconfig_detail.html", context)
    listed = versions[0] if number is None else next(
        (v for v in versions if v.number == number), None
    )  # fmt: skip
    if listed is None:
        raise Http404(f"{backend.name} has no config v{number}")
    version = ConfigVersion.objects.select_related("parent").get(pk=listed.pk)  # with its text
    parent = version.parent.yaml_text if version.parent else ""
    context |= {
        "version": version,
        "latest": versions[0],
        "change": getattr(listed, "merged_from", None),  # None: not merged from a config PR
        "lines": enumerate(version.yaml_text.splitlines(), start=1),
        "hunks": configdiff.hunks(parent, version.yaml_text),
        "view": diff_view(request),
        "diff_url": reverse("selection:configversion_detail", args=[backend.slug, version.number]),
        "old_name": f"v{version.parent.number}" if version.parent else "nothing",
        "new_name": f"v{version.number}",
    }
    return render(request, "selection/backendconfig_detail.html", context)


@login_required
def backendconfig_detail(request: HttpRequest, slug: str) -> HttpResponse:
    """The backend's latest config, or the version `?v=N` names."""
    backend = get_object_or_404(Backend, slug=slug)
    form = ConfigViewForm(request.GET)
    if not form.is_valid():
        return HttpResponseBadRequest(form.errors.as_text())
    return _page(request, backend, form.cleaned_data["v"])


@login_required
def configversion_detail(request: HttpRequest, slug: str, number: int) -> HttpResponse:
    return _page(request, get_object_or_404(Backend, slug=slug), number)


@login_required
def configversion_blame(request: HttpRequest, slug: str, number: int) -> HttpResponse:
    version = get_object_or_404(
        ConfigVersion.objects.select_related("backend"), backend__slug=slug, number=number
    )
    context = {
        "backend": version.backend,
        "version": version,
        "lines": confighistory.blame(version),
        "nav": "config",
    }
    return render(request, "selection/configversion_blame.html", context)
