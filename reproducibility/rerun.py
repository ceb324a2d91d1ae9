"""Re-run a bundle: a new run made of the same parts, compared with the original test by test.

Steps of `start`:
1. the bundle must be ready and pass verification (archive hash and manifest);
2. its metadata.json names the PyTorch SHA, the backend version, the config
   version (by SHA-256) and the artifacts (by SHA-256): each must still exist;
3. a manual trigger and a run of job "<job> (re-run)" are created with exactly
   those parts, linked to the original by a Rerun row, and planned like any run.
`comparison` then pairs each test's final outcome and failure category.
"""

import json
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from django.db import transaction

from crcr_site.lib import enqueue
from reproducibility import bundles
from reproducibility.models import Bundle, Rerun
from runs.models import Artifact, Failure, Run, TestResult, Trigger
from selection.models import ConfigVersion

RERUN_SUFFIX = " (re-run)"


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


def bundle_metadata(bundle: Bundle) -> dict[str, Any]:
    """The verified metadata.json of a ready bundle."""
    if bundle.status != Bundle.Status.READY or not bundle.file:
        raise RerunError(f"the bundle is {bundle.get_status_display()}, not ready")
    if not bundles.stored_name_is_safe(bundle.file.name):
        raise RerunError("the bundle's stored name is not one crcr wrote")
    with tempfile.TemporaryDirectory() as scratch:
        archive = Path(scratch) / "bundle.tar.gz"
        with bundle.file.open("rb") as stream:
            archive.write_bytes(stream.read())
        problems = bundles.verify_archive(archive, bundle.sha256)
        if problems:
            raise RerunError("the bundle fails verification: " + "; ".join(problems[:5]))
        with tarfile.open(archive, "r:gz") as tar:
            member = tar.extractfile(f"{bundles.top_folder(bundle)}/metadata.json")
            if member is None:
                raise RerunError("the bundle has no metadata.json")
            return dict(json.load(member))


def parts_of(bundle: Bundle, meta: dict[str, Any]) -> tuple[ConfigVersion, list[Artifact]]:
    """The config version and artifacts the bundle names, as they exist now."""
    config = ConfigVersion.objects.filter(
        backend=bundle.run.backend, sha256=meta["config"]["sha256"]
    ).first()
    if config is None:
        raise RerunError(f"config {meta['config']['sha256'][:12]} no longer exists")
    wanted = {a["sha256"]: a for a in meta["artifacts"]}
    artifacts = list(Artifact.objects.filter(sha256__in=list(wanted)))
    missing = set(wanted) - {a.sha256 for a in artifacts}
    if missing:
        names = ", ".join(sorted(wanted[sha]["name"] for sha in missing))
        raise RerunError(f"artifact(s) {names} are no longer registered")
    return config, artifacts


def start(bundle: Bundle, user: Any = None) -> Rerun:
    """Create and enqueue the new run; raises RerunError and changes nothing on bad input."""
    from runs.tasks import plan_run

    meta = bundle_metadata(bundle)
    config, artifacts = parts_of(bundle, meta)
    original = bundle.run
    with transaction.atomic():
        trigger = Trigger.objects.create(
            backend=original.backend,
            kind=Trigger.Kind.MANUAL,
            pytorch_sha=meta["run"]["pytorch_sha"],
            requested_by=user,
        )
        run = Run.objects.create(
            trigger=trigger,
            backend=original.backend,
            job_name=original.job_name.removesuffix(RERUN_SUFFIX) + RERUN_SUFFIX,
            is_primary=False,
            backend_version=meta["run"]["backend_version"],
            pytorch_sha=meta["run"]["pytorch_sha"],
            test_suite_sha=meta["run"]["test_suite_sha"],
            config_version=config,
        )
        run.artifacts.set(artifacts)
        rerun = Rerun.objects.create(original=original, run=run, bundle=bundle, requested_by=user)
        enqueue.after_commit(plan_run, run.pk)
    return rerun


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
    """Every test of either run, with its outcome class before and after."""
    before, after = final_outcomes(original), final_outcomes(new)
    absent = ("(absent)", "")
    return [
        Row(node_id, *before.get(node_id, absent), *after.get(node_id, absent))
        for node_id in sorted(set(before) | set(after))
    ]
