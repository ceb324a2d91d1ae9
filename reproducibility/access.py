"""Who may reach a run's reproducibility data and its bundles.

Every signed-in user may read every run today (viewers read everything, see
crcr_site.lib.access); starting work (bundles with wheels, re-runs,
bisections) needs the reviewer role. A bundle is only ever found by its UUID
and its run's UUID together, and only a ready one whose stored name crcr wrote
is served: no user-given path ever reaches the storage.
"""

from django.http import Http404
from django.shortcuts import get_object_or_404

from reproducibility import bundles
from reproducibility.models import Bundle
from runs.models import Run


def run_for(uuid: str) -> Run:
    return get_object_or_404(
        Run.objects.select_related("backend", "trigger__dispatch", "config_version"), uuid=uuid
    )


def bundle_for(run: Run, bundle_uuid: str) -> Bundle:
    """A bundle of this run (404 for another run's bundle or an unknown one)."""
    return get_object_or_404(Bundle.objects.select_related("run"), uuid=bundle_uuid, run=run)


def downloadable(run: Run, bundle_uuid: str) -> Bundle:
    """A ready bundle of this run whose archive is in the bundle storage, else 404."""
    bundle = bundle_for(run, bundle_uuid)
    if bundle.status != Bundle.Status.READY or not bundle.file:
        raise Http404("this bundle is not ready")
    if not bundles.stored_name_is_safe(bundle.file.name):
        raise Http404("this bundle is not in the bundle storage")
    return bundle
