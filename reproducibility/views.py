"""Pages: a run's reproducibility record, its bundles, re-runs and bisections."""

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import FileResponse, Http404, HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST
from django_htmx.http import HttpResponseStopPolling

from crcr_site.lib.access import reviewer_required
from crcr_site.lib.htmx import HtmxHttpRequest
from reproducibility import access, attestation, bisect, bundles, logs, rerun, summary
from reproducibility import metadata as run_metadata
from reproducibility.forms import AttemptFilterForm, BundleForm, ShardLogForm, TestLogForm
from reproducibility.models import Bisection, Bundle, Rerun


@login_required
def record_detail(request: HtmxHttpRequest, uuid: str) -> HttpResponse:
    run = access.run_for(uuid)
    if request.htmx:
        shown = list(run.bundles.order_by("-created_at", "-pk")[:10])
        busy = any(not bundle.is_done for bundle in shown)
        context = {"run": run, "bundles": shown, "bundle_pending": busy}
        response = render(request, "reproducibility/record_detail.html#bundles", context)
        # Once no bundle is being built the page stops polling (htmx's 286).
        return response if busy else HttpResponseStopPolling(response.content)
    form = AttemptFilterForm(request.GET)
    outcome = form.cleaned_data["outcome"] if form.is_valid() else ""
    context = summary.context(run, outcome) | {"filter": form, "bundle_form": BundleForm()}
    # Only wheels stored as files can go inside a bundle (an installed torch cannot).
    context["stored_wheels"] = run.artifacts.exclude(file="").count()
    return render(request, "reproducibility/record_detail.html", context | {"nav": "runs"})


@require_POST
@reviewer_required
def bundle_create(request: HttpRequest, uuid: str) -> HttpResponse:
    run = access.run_for(uuid)
    form = BundleForm(request.POST)
    if not form.is_valid() or not run.is_finished:
        messages.error(request, "A bundle is built once the run has finished.")
        return redirect("reproducibility:record_detail", uuid=run.uuid)
    # The bundle's links point at the server it is asked from (else CRCR_PUBLIC_URL).
    bundle = bundles.request(
        run, form.cleaned_data["include_artifacts"], request.user, request.build_absolute_uri("/")
    )
    # Said once, in words that stay true: the section below shows its status live.
    shown = "" if bundle.is_done else ": its row below shows when it is ready"
    messages.success(request, f"Bundle requested{shown}.")
    return redirect("reproducibility:record_detail", uuid=run.uuid)


def serve(bundle: Bundle) -> FileResponse:
    response = FileResponse(
        bundle.file.open("rb"),
        as_attachment=True,
        filename=bundle.download_name,
        content_type="application/gzip",
    )
    response["X-Checksum-SHA256"] = bundle.sha256
    return response


@login_required
def bundle_download(request: HttpRequest, uuid: str, bundle_uuid: str) -> FileResponse:
    return serve(access.downloadable(access.run_for(uuid), bundle_uuid))


@login_required
def attestation_detail(request: HttpRequest, uuid: str) -> JsonResponse:
    statement = attestation.statement(run_metadata.metadata(access.run_for(uuid)))
    response = JsonResponse(statement, json_dumps_params={"indent": 2})
    response["Content-Disposition"] = f'attachment; filename="crcr-run-{uuid}.intoto.json"'
    return response


@require_POST
@reviewer_required
def rerun_create(request: HttpRequest, uuid: str, bundle_uuid: str) -> HttpResponse:
    bundle = access.bundle_for(access.run_for(uuid), bundle_uuid)
    try:
        # Records and enqueues only: a worker checks the archive (its page shows how).
        made = rerun.start(bundle, user=request.user)
    except rerun.RerunError as error:
        messages.error(request, f"Cannot re-run this bundle: {error}")
        return redirect("reproducibility:record_detail", uuid=uuid)
    return redirect("reproducibility:rerun_detail", uuid=made.uuid)


@login_required
def rerun_detail(request: HtmxHttpRequest, uuid: str) -> HttpResponse:
    made = get_object_or_404(Rerun.objects.select_related("original", "run", "bundle"), uuid=uuid)
    # Until it is planned the new run has no test to compare: the worker is still
    # checking the bundle (queued), or found it could not run (its error).
    planned = made.run.started_at is not None
    rows = rerun.comparison(made.original, made.run) if planned else []
    context = {
        "rerun": made,
        "planned": planned,
        "rows": rows,
        "changed": sum(not row.same and not row.waiting for row in rows),
        "waiting": sum(row.waiting for row in rows),
        "nav": "runs",
    }
    if request.htmx:
        response = render(request, "reproducibility/rerun_detail.html#comparison", context)
        return HttpResponseStopPolling(response.content) if made.run.is_finished else response
    return render(request, "reproducibility/rerun_detail.html", context)


@require_POST
@reviewer_required
def bisection_create(request: HttpRequest, uuid: str) -> HttpResponse:
    run = access.run_for(uuid)
    try:
        bisection = bisect.start(run, user=request.user)
    except bisect.BisectError as error:
        messages.error(request, f"Cannot bisect: {error}")
        return redirect("reproducibility:record_detail", uuid=run.uuid)
    return redirect("reproducibility:bisection_detail", uuid=bisection.uuid)


@login_required
def bisection_detail(request: HtmxHttpRequest, uuid: str) -> HttpResponse:
    bisection = get_object_or_404(
        Bisection.objects.select_related("good_run", "bad_run"), uuid=uuid
    )
    context = {"bisection": bisection, "steps": bisection.steps_in_order(), "nav": "runs"}
    if request.htmx:
        response = render(request, "reproducibility/bisection_detail.html#steps", context)
        return HttpResponseStopPolling(response.content) if bisection.is_finished else response
    return render(request, "reproducibility/bisection_detail.html", context)


@login_required
def test_log(request: HttpRequest, uuid: str) -> HttpResponse:
    """A failed test's log: its trace with the error line marked, and how to reproduce it
    (without `test`: the run's first regression, else its first failure)."""
    run = access.run_for(uuid)
    form = TestLogForm(request.GET)
    context: dict[str, object] = {"run": run, "form": form, "nav": "runs"}
    if not form.is_valid():
        return render(request, "reproducibility/test_log.html", context, status=400)
    node_id = form.cleaned_data["test"] or logs.first_failure(run)
    found = logs.test_log(run, node_id, form.cleaned_data["attempt"]) if node_id else None
    context |= {"asked": node_id, "log": found, "shards": run.shards.listed()}
    if found is None:
        return render(
            request, "reproducibility/test_log.html", context, status=404 if node_id else 200
        )
    context |= {
        "reproduce": logs.reproduce(run, found.node_id),
        "others": logs.other_failures(run, found.node_id),
    }
    return render(request, "reproducibility/test_log.html", context)


@login_required
def shard_log(request: HttpRequest, uuid: str, index: int) -> HttpResponse:
    """One process output of a shard, a page of lines at a time, its failures marked."""
    run = access.run_for(uuid)
    shard = logs.shard_for(run, index)
    if shard is None:
        raise Http404("this run has no such shard")
    form = ShardLogForm(request.GET)
    context: dict[str, object] = {"run": run, "shard": shard, "form": form, "nav": "runs"}
    if not form.is_valid():
        return render(request, "reproducibility/shard_log.html", context, status=400)
    asked = form.cleaned_data
    outputs = logs.shard_logs(run, index)
    shown = next(
        (o for o in outputs if (o.claim, o.process) == (asked["claim"], asked["process"])),
        outputs[0] if outputs else None,
    )
    page = logs.read_page(shown.name, asked["page"], asked["test"]) if shown else None
    failed = shard.results.filter(failure__isnull=False).select_related("failure")
    context |= {
        "outputs": outputs,
        "shown": shown,
        "page": page,
        "failed": failed.order_by("node_id")[: logs.OTHER_FAILURES],
        "failed_count": failed.count(),
    }
    return render(request, "reproducibility/shard_log.html", context)
