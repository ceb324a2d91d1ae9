"""Repro bundles: request, build on a worker, store, verify, serve and prune.

A bundle is one `.tar.gz` holding a single folder `crcr-run-<uuid>/` with the
files `reproducibility.bundle_contents` writes and a `manifest.json` listing
the SHA-256 and size of every other file. The archive's own SHA-256 is kept on
the Bundle row and shown on the page, so the manifest is anchored too.

Building (the `build_bundle` task on the `default` queue):
1. claim the pending row (pending -> building) or return quietly;
2. stream the files into the archive as they are made or read from storage, each
   hashed on the way (`bundle_archive`), then the manifest over them;
3. store the archive under `bundles/<uuid>.tar.gz` in the default storage and mark
   the row ready with an expiry date (CRCR_BUNDLE_RETENTION_DAYS); any error marks
   it failed with the reason.
"""

import contextlib
import logging
import re
import tarfile
import tempfile
import zlib
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from django.core.files import File
from django.db import transaction
from django.utils import timezone

from crcr_site.lib import enqueue, leases
from crcr_site.lib.env import env_int
from reproducibility import bundle_contents
from reproducibility.bundle_archive import BundleArchive
from reproducibility.models import Bundle
from reproducibility.reproduce import sha256_file, verify_folder
from runs.models import Run

logger = logging.getLogger(__name__)

FORMAT = "crcr-bundle/1"
# What a stored bundle's name may look like; anything else is never served.
STORED_NAME = re.compile(r"bundles/[0-9a-f-]{36}(_[A-Za-z0-9]{1,16})?\.tar\.gz")


def retention_days() -> int:
    """CRCR_BUNDLE_RETENTION_DAYS: how long a bundle is kept before it is pruned."""
    return env_int("CRCR_BUNDLE_RETENTION_DAYS", 30, minimum=1)


def request(
    run: Run, include_artifacts: bool = False, user: Any = None, public_url: str = ""
) -> Bundle:
    """The run's bundle of this kind, pending, building or ready; a new one is enqueued,
    its links pointing at `public_url` (the server it was asked from) when given."""
    from reproducibility.tasks import build_bundle

    alive = (Bundle.Status.PENDING, Bundle.Status.BUILDING, Bundle.Status.READY)
    with transaction.atomic():
        # Concurrency guard: two callers for one run (a redelivered finish, a click)
        # queue on the run's row lock, so the second finds the first one's bundle.
        Run.objects.select_for_update().filter(pk=run.pk).first()
        existing = run.bundles.current().filter(
            include_artifacts=include_artifacts, status__in=alive
        )
        bundle = existing.first()
        if bundle is not None:
            return bundle
        bundle = Bundle.objects.create(
            run=run, include_artifacts=include_artifacts, requested_by=user, public_url=public_url
        )
        enqueue.after_commit(build_bundle, bundle.pk)
    return bundle


def top_folder(bundle: Bundle) -> str:
    return f"crcr-run-{bundle.run.uuid}"


def build(bundle_id: int) -> Bundle | None:
    """Build a pending bundle; None when it is gone or another worker claimed it."""
    bundle = Bundle.objects.select_related("run__backend").filter(pk=bundle_id).first()
    if bundle is None or not bundle.claim():
        return None
    try:
        with (
            leases.held(bundle, Bundle.Status.BUILDING),
            tempfile.TemporaryDirectory(prefix="crcr-bundle-") as scratch,
        ):
            archive = Path(scratch) / "bundle.tar.gz"
            manifest = pack(bundle, archive, Path(scratch) / "work")
            store(bundle, archive, manifest)
    except Exception as error:  # any failure is shown on the page, never swallowed silently
        logger.exception("bundle %s of run %s failed", bundle.uuid, bundle.run.uuid)
        Bundle.objects.filter(pk=bundle.pk, status=Bundle.Status.BUILDING).update(
            status=Bundle.Status.FAILED, error=f"{type(error).__name__}: {error}"[:4000],
            expires_at=expiry(),
        )  # fmt: skip
    return Bundle.objects.filter(pk=bundle.pk).first()  # None when the run was deleted meanwhile


def give_up(bundle: Bundle, reason: str) -> None:
    """A bundle whose builder kept dying: failed with the reason, so a new one may be asked for."""
    Bundle.objects.filter(pk=bundle.pk, status=bundle.status).update(
        status=Bundle.Status.FAILED, error=reason, expires_at=expiry()
    )


def expiry(now: datetime | None = None) -> datetime:
    return (now or timezone.now()) + timedelta(days=retention_days())


def pack(bundle: Bundle, path: Path, scratch: Path) -> dict[str, Any]:
    """Write the bundle's archive to `path` (`scratch`: a folder to work in); its manifest."""
    scratch.mkdir()
    archive = BundleArchive(path, top_folder(bundle))
    try:
        warnings, meta = bundle_contents.assemble(bundle, archive, scratch)
        manifest = manifest_of(archive.all_files, bundle, meta, warnings)
    except BaseException:
        with contextlib.suppress(OSError):  # the error that stopped the build is the one shown
            archive.abandon()
        raise
    archive.close(manifest)
    return manifest


def manifest_of(
    files: list[dict[str, Any]], bundle: Bundle, meta: dict[str, Any], warnings: list[str]
) -> dict[str, Any]:
    """manifest.json: the SHA-256 and size of every file, the referenced artifacts."""
    return {
        "format": FORMAT,
        "run": str(bundle.run.uuid),
        "bundle": str(bundle.uuid),
        "created_at": timezone.now().isoformat(),
        "algorithm": "sha256",
        "files": sorted(files, key=lambda entry: entry["path"]),
        "referenced": [a for a in meta["artifacts"] if not a.get("bundled_path")],
        "warnings": warnings,
    }


def store(bundle: Bundle, archive: Path, manifest: dict[str, Any]) -> None:
    """Save the archive in the default storage and mark the bundle ready."""
    digest = sha256_file(archive)
    with archive.open("rb") as stream:
        bundle.file.save(f"{bundle.uuid}.tar.gz", File(stream), save=False)
    done = Bundle.objects.filter(pk=bundle.pk, status=Bundle.Status.BUILDING).update(
        file=bundle.file.name, sha256=digest, size=archive.stat().st_size, manifest=manifest,
        status=Bundle.Status.READY, built_at=timezone.now(), expires_at=expiry(), error="",
    )  # fmt: skip
    if not done:
        bundle.file.delete(save=False)  # the run was deleted meanwhile: keep no orphan


def stored_name_is_safe(name: str | None) -> bool:
    """The stored name is one crcr wrote: no other path of the storage is ever served."""
    return bool(name) and bool(STORED_NAME.fullmatch(name or "")) and ".." not in (name or "")


def prune(now: datetime | None = None) -> list[Bundle]:
    """Delete the archives of bundles past their retention; the rows stay, marked pruned."""
    pruned = []
    for bundle in Bundle.objects.expired(now):
        # Concurrency guard: of two pruners, only the one that moves the row deletes the file.
        if not Bundle.objects.filter(pk=bundle.pk, status=bundle.status).update(
            status=Bundle.Status.PRUNED
        ):
            continue
        if bundle.file and stored_name_is_safe(bundle.file.name):
            bundle.file.delete(save=False)
        Bundle.objects.filter(pk=bundle.pk).update(file="")
        pruned.append(bundle)
    return pruned


def _member_is_safe(member: tarfile.TarInfo) -> bool:
    parts = Path(member.name).parts
    return (
        (member.isfile() or member.isdir())
        and bool(parts)
        and not Path(member.name).is_absolute()
        and ".." not in parts
    )


def verify_archive(archive: Path, expected_sha256: str = "") -> list[str]:
    """Problems with a bundle archive, each naming the archive or the file inside it."""
    problems = []
    if expected_sha256 and (found := sha256_file(archive)) != expected_sha256:
        problems.append(
            f"{archive.name}: SHA-256 {found[:16]}… differs from the recorded "
            f"{expected_sha256[:16]}…"
        )
    try:
        with tarfile.open(archive, "r:gz") as tar, tempfile.TemporaryDirectory() as scratch:
            members = tar.getmembers()
            unsafe = [m.name for m in members if not _member_is_safe(m)]
            if unsafe:
                return problems + [f"{name}: unsafe archive member" for name in unsafe]
            tar.extractall(scratch, filter="data")
            tops = list(Path(scratch).iterdir())
            if len(tops) != 1 or not tops[0].is_dir():
                return problems + [f"{archive.name}: not one top folder"]
            problems += [f"{tops[0].name}/{problem}" for problem in verify_folder(tops[0])]
    except (tarfile.TarError, EOFError, OSError, zlib.error) as error:
        problems.append(f"{archive.name}: not a readable .tar.gz ({error})")
    return problems
