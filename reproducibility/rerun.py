"""Re-run a bundle: a new run made of the same parts, compared with the original test by test.

`start` runs in the web request and does only what is cheap:
1. the bundle must be ready and stored under a name crcr wrote (else RerunError,
   and nothing is created);
2. a manual trigger and a run of job "<job> (re-run)" are created, queued, with
   the original's parts, linked to the original by a Rerun row; then
   `reproducibility.tasks.prepare_rerun` is sent after commit.
`prepare` runs on a worker, outside the request:
3. the archive is read from storage and verified (its hash, then every file
   against the manifest), and its metadata.json read;
4. the PyTorch SHA, backend version, config version (by SHA-256) and artifacts (by
   SHA-256) it names must still exist: the run takes exactly those parts and is
   sent to planning like any run; any problem ends the run in error with the
   reason, which the re-run's page shows.
`comparison` then pairs each test's final outcome and failure category.
"""

import json
import shutil
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.db import transaction

from crcr_site.lib import enqueue
from reproducibility import bundles
from reproducibility.models import Bundle, Rerun
from runs import planning
from runs.combinations import RERUN_SUFFIX
from runs.models import Artifact, Failure, Run, TestResult, Trigger
from selection.models import ConfigVersion

# A test's outcome in the re-run while it runs and has not reached the test.
NOT_RUN_YET = "(not run yet)"


class RerunError(Exception):
    """The bundle cannot be re-run; the message says why."""


@dataclass
class Row:
    node_id: str
    before: str
    before_category: str
    after: str
    after_category: str

    @property
    def same(self) -> bool:
        return (self.before, self.before_category) == (self.after, self.after_category)

    @property
    def waiting(self) -> bool:
        """The re-run is still going and has no outcome of this test yet: not a difference."""
        return self.after == NOT_RUN_YET


@dataclass
class Parts:
    """What a bundle's metadata names, as it exists now."""

    pytorch_sha: str
    backend_version: str
    test_suite_sha: str
    config: ConfigVersion
    artifacts: list[Artifact]


def check_ready(bundle: Bundle) -> None:
    """What the web request checks, without opening the archive."""
    if bundle.status != Bundle.Status.READY or not bundle.file:
        raise RerunError(f"the bundle is {bundle.get_status_display()}, not ready")
    if not bundles.stored_name_is_safe(bundle.file.name):
        raise RerunError("the bundle's stored name is not one crcr wrote")


def bundle_metadata(bundle: Bundle) -> dict[str, Any]:
    """The verified metadata.json of a ready bundle (reads and unpacks the whole archive)."""
    check_ready(bundle)
    with tempfile.TemporaryDirectory(prefix="crcr-rerun-") as scratch:
        archive = Path(scratch) / "bundle.tar.gz"
        try:
            with bundle.file.open("rb") as stream, archive.open("wb") as copy:
                shutil.copyfileobj(stream, copy)
        except OSError as error:
            raise RerunError(f"the bundle's archive cannot be read: {error}") from error
        problems = bundles.verify_archive(archive, bundle.sha256)
        if problems:
            raise RerunError("the bundle fails verification: " + "; ".join(problems[:5]))
        try:
            with tarfile.open(archive, "r:gz") as tar:
                member = tar.extractfile(f"{bundles.top_folder(bundle)}/metadata.json")
                meta = json.load(member) if member is not None else None
        except (KeyError, tarfile.TarError, ValueError) as error:
            raise RerunError(f"the bundle's metadata.json is unreadable ({error})") from error
    if not isinstance(meta, dict):
        raise RerunError("the bundle has no metadata.json object")
    return meta


def parts_of(bundle: Bundle, meta: dict[str, Any]) -> Parts:
    """The SHAs, config version and artifacts the bundle names, as they exist now."""
    try:
        run, config_sha = meta["run"], meta["config"]["sha256"]
        wanted = {a["sha256"]: a for a in meta["artifacts"]}
        shas = (str(run["pytorch_sha"]), str(run["backend_version"]), str(run["test_suite_sha"]))
    except (KeyError, TypeError) as error:
        raise RerunError(f"the bundle's metadata.json lacks {error}") from error
    config = ConfigVersion.objects.filter(backend=bundle.run.backend, sha256=config_sha).first()
    if config is None:
        raise RerunError(f"config {str(config_sha)[:12]} no longer exists")
    artifacts = list(Artifact.objects.filter(sha256__in=list(wanted)))
    missing = set(wanted) - {a.sha256 for a in artifacts}
    if missing:
        names = ", ".join(sorted(str(wanted[sha].get("name", sha)) for sha in missing))
        raise RerunError(f"artifact(s) {names} are no longer registered")
    return Parts(*shas, config=config, artifacts=artifacts)


def start(bundle: Bundle, user: Any = None) -> Rerun:
    """Record the re-run and send its preparation to a worker; raises RerunError and
    creates nothing when the bundle is not ready."""
    from reproducibility.tasks import prepare_rerun

    check_ready(bundle)
    original = bundle.run
    with transaction.atomic():
        trigger = Trigger.objects.create(
            backend=original.backend,
            kind=Trigger.Kind.MANUAL,
            pytorch_sha=original.pytorch_sha,
            requested_by=user,
        )
        # The original's parts until the worker has read the bundle's (the same, unless
        # the bundle says otherwise): the run is complete from the start.
        run = Run.objects.create(
            trigger=trigger,
            backend=original.backend,
            job_name=original.job_name.removesuffix(RERUN_SUFFIX) + RERUN_SUFFIX,
            is_primary=False,
            backend_version=original.backend_version,
            pytorch_sha=original.pytorch_sha,
            test_suite_sha=original.test_suite_sha,
            config_version_id=original.config_version_id,
            # The same parts as the original: what moved since the job's last green run
            # is what had moved for the original (its job has none of its own).
            changed_since_green=original.changed_since_green,
        )
        run.artifacts.set(original.artifacts.all())
        made = Rerun.objects.create(original=original, run=run, bundle=bundle, requested_by=user)
        enqueue.after_commit(prepare_rerun, made.pk)
    return made


def prepare(rerun_id: int) -> Run | None:
    """On a worker: check the re-run's bundle, give its run the parts the bundle names
    and send it to planning; the run, or None (a problem ended it, or it is no longer
    queued: a redelivery, or the lost-work sweep planned it meanwhile)."""
    made = Rerun.objects.select_related("run", "bundle__run__backend").filter(pk=rerun_id).first()
    if made is None or made.run.status != Run.Status.QUEUED:
        return None
    try:
        if made.bundle is None:
            raise RerunError("the bundle was deleted before the re-run started")
        parts = parts_of(made.bundle, bundle_metadata(made.bundle))
    except RerunError as error:
        _end_queued(made.run, f"Cannot re-run this bundle: {error}")
        return None
    return _give_parts(made.run, parts)


def _give_parts(run: Run, parts: Parts) -> Run | None:
    from runs.tasks import plan_run

    with transaction.atomic():
        # Concurrency guard: only a run still queued changes its parts; one that left
        # the queue meanwhile is planning already (None).
        queued = Run.objects.select_for_update().filter(pk=run.pk, status=Run.Status.QUEUED).first()
        if queued is None:
            return None
        queued.pytorch_sha, queued.backend_version = parts.pytorch_sha, parts.backend_version
        queued.test_suite_sha, queued.config_version = parts.test_suite_sha, parts.config
        fields = ["pytorch_sha", "backend_version", "test_suite_sha", "config_version"]
        queued.save(update_fields=fields)
        queued.artifacts.set(parts.artifacts)
        Trigger.objects.filter(pk=queued.trigger_id).update(pytorch_sha=parts.pytorch_sha)
        enqueue.after_commit(plan_run, queued.pk)
    return queued


def _end_queued(run: Run, reason: str) -> None:
    """End a re-run's run in error before it was planned (its status, reason and callbacks)."""
    with transaction.atomic():
        # Concurrency guard: a run that left the queue meanwhile is not ended here.
        queued = Run.objects.select_for_update().filter(pk=run.pk, status=Run.Status.QUEUED).first()
        if queued is not None:
            planning.end(queued, Run.Status.ERROR, reason)


def final_outcomes(run: Run) -> dict[str, tuple[str, str]]:
    """Per test id: the outcome of its last attempt and its failure category."""
    categories = dict(Failure.objects.filter(run=run).values_list("result__node_id", "category"))
    final: dict[str, str] = {}
    rows = TestResult.objects.filter(run=run).order_by("attempt").values_list("node_id", "outcome")
    for node_id, outcome in rows:
        final[node_id] = outcome
    return {
        node_id: (outcome, categories.get(node_id, "") if outcome in TestResult.FAILING else "")
        for node_id, outcome in final.items()
    }


def comparison(original: Run, new: Run) -> list[Row]:
    """Every test of either run, with its outcome class before and after. While the new
    run goes on, a test it has no outcome of yet is waiting (`NOT_RUN_YET`), not absent."""
    before, after = final_outcomes(original), final_outcomes(new)
    absent = ("(absent)", "")
    not_yet = absent if new.is_finished else (NOT_RUN_YET, "")
    return [
        Row(node_id, *before.get(node_id, absent), *after.get(node_id, not_yet))
        for node_id in sorted(set(before) | set(after))
    ]
