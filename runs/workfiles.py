"""A run's files between hosts: each host works in its own folder, storage keeps the record.

A host writes a run's files (the build log; each test process's ids, JUnit XML, reuse
JSON report, progress log and output) under its work folder (CRCR_WORK_DIR) at the
names they have in storage, `runs/<run uuid>/…`, and `publish` sends them there, where
the bundle builder (any host) reads them with `download`. Test trees travel the same
way (`runs.worktrees`). Hosts share only the database, the broker and the storage.

When the work folder is the file storage's own folder (one host, the embedded default)
the files are already where they belong and nothing is copied.
"""

import os
import shutil
from pathlib import Path

from django.conf import settings
from django.core.files import File
from django.core.files.storage import default_storage


def work_root() -> Path:
    """This host's work folder."""
    return Path(settings.CRCR_WORK_DIR or settings.MEDIA_ROOT)


def local_storage_root() -> Path | None:
    """The storage's own folder when it is a file system on this host, else None."""
    location = getattr(default_storage, "location", None)
    return Path(location).resolve() if location else None


def in_storage() -> bool:
    """Whether this host's work folder is the storage itself (nothing to copy)."""
    return local_storage_root() == work_root().resolve()


def name_of(path: Path) -> str:
    """The storage name of a file in the work folder."""
    return path.resolve().relative_to(work_root().resolve()).as_posix()


def publish(path: Path) -> list[str]:
    """Send a file, or every file in a folder, to storage at the same names; a symbolic
    link is never followed (test code can write into these folders). Returns the names."""
    if in_storage() or not path.exists():
        return []
    if path.is_file():
        files = [] if path.is_symlink() else [path]
    else:
        files = [Path(folder, name) for folder, _, names in os.walk(path) for name in names]
        files = sorted(file for file in files if not file.is_symlink())
    return [save(name_of(file), file) for file in files]


def save(name: str, source: Path) -> str:
    """Store `source` as exactly `name`, replacing what was there (a retried upload)."""
    if default_storage.exists(name):
        default_storage.delete(name)
    with source.open("rb") as stream:
        stored = default_storage.save(name, File(stream))
    if stored != name:  # a backend that renamed it would lose the file for its readers
        raise OSError(f"storage stored {name} as {stored}")
    return stored


def listed(prefix: str) -> list[str]:
    """Every file name in storage under `prefix`, recursively, sorted."""
    if not default_storage.exists(prefix) and local_storage_root() is not None:
        return []
    folders, files = default_storage.listdir(prefix)
    names = [f"{prefix}/{name}" for name in files]
    for folder in folders:
        names += listed(f"{prefix}/{folder}")
    return sorted(names)


def download(name: str, target: Path) -> Path:
    """Copy a stored file to `target` (its folder is made)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    with default_storage.open(name, "rb") as stream, target.open("wb") as out:
        shutil.copyfileobj(stream, out, 1 << 20)
    return target
