"""A combination's virtual environment, built once per device host from its wheels.

Every test process of a combination (planning's collection, the shards, re-runs and
bisect steps) runs in the interpreter `prepared(artifacts)` yields:

1. Registered, not built (no CRCR_BUILD_COMMAND: the installed torch and the backend's
   source): the worker's own interpreter, and the environment says so (`installed`).
2. Otherwise its key is the SHA-256 of the interpreter's version, the wheels' SHA-256 and
   the test requirements (CRCR_TEST_REQUIREMENTS); it lives in CRCR_ENV_DIR/<key>, on
   this host (never in shared storage).
3. One builder per key on a host: the key's lock file is held exclusively while the
   environment is looked up or built (other workers wait, then reuse it), then shared
   for as long as the caller's test processes use it.
4. Building: fetch each wheel from storage into the host's wheel cache and check its
   SHA-256 (a corrupt or missing one is an ArtifactError naming the hash), `uv venv`,
   `uv pip install --no-deps` the wheels and the test requirements, record `uv pip
   freeze`, then move the finished folder into place: a half-built one is never used.
5. Then the least recently used environments past CRCR_ENV_CACHE_GB are removed, except
   those in use (their lock is held shared) and their wheels with them.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.conf import settings
from django.utils import timezone

from runs.artifacts import ArtifactError, sha256_file
from runs.models import Artifact

FACTS = "crcr-environment.json"
WHEELS = "wheels"
UV_CACHE = "uv-cache"
# uv installs from its cache by hard links: a second environment of the same torch
# takes seconds. Past this a build is stuck.
BUILD_TIMEOUT = 1800
FORMAT = 1


@dataclass(frozen=True)
class Environment:
    """The interpreter of a combination's test processes, and what is in it."""

    python: str
    key: str = ""  # empty: the worker's own interpreter (nothing was built)
    wheels: tuple[dict[str, str], ...] = ()
    freeze: str = ""
    facts: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def installed(self) -> bool:
        return not self.key

    def describe(self) -> dict[str, Any]:
        """What a run's metadata records of it."""
        if self.installed:
            return {"kind": "installed", "python": self.python,
                    "note": "no build command: the worker's installed torch and backend source"}  # fmt: skip
        return {"kind": "built", "python": self.python, "key": self.key,
                "wheels": list(self.wheels), "requirements_sha256": self.facts.get(
                    "requirements_sha256", ""), "built_on": self.facts.get("host", ""),
                "built_at": self.facts.get("built_at", ""), "pip_freeze": self.freeze}  # fmt: skip


def installed() -> Environment:
    return Environment(python=sys.executable)


def root() -> Path:
    return Path(settings.CRCR_ENV_DIR)


def interpreter_tag() -> str:
    return f"{platform.python_implementation()}-{platform.python_version()}-{platform.machine()}"


def key_for(wheels: Sequence[Artifact]) -> str:
    """The environment's identity: the interpreter, the wheels and the test requirements."""
    identity = {
        "format": FORMAT,
        "python": interpreter_tag(),
        "wheels": sorted(artifact.sha256 for artifact in wheels),
        "requirements": requirements_sha256(),
    }
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode()).hexdigest()


def requirements_sha256() -> str:
    return sha256_file(Path(settings.CRCR_TEST_REQUIREMENTS))


def built_wheels(artifacts: Iterable[Artifact]) -> list[Artifact]:
    return sorted((a for a in artifacts if a.file), key=lambda a: (a.kind, a.name))


@contextmanager
def prepared(artifacts: Iterable[Artifact]) -> Iterator[Environment]:
    """The combination's environment, built here when missing, held while in use."""
    wheels = built_wheels(artifacts)
    if not wheels:
        yield installed()
        return
    key = key_for(wheels)
    root().mkdir(parents=True, exist_ok=True)
    with (root() / f"{key}.lock").open("a") as lock:
        # Concurrency guard: one builder per key on this host (exclusive); once it is
        # ready, any number of users hold it shared, and eviction skips it. Lock files
        # are never removed, so every process locks the same inode.
        fcntl.flock(lock, fcntl.LOCK_EX)
        environment = load(key) or build(key, wheels)
        fcntl.flock(lock, fcntl.LOCK_SH)
        os.utime(root() / key / FACTS)  # its last use, for eviction
        evict(keep=key)
        yield environment


def load(key: str) -> Environment | None:
    """A ready environment of this key, or None."""
    try:
        facts = json.loads((root() / key / FACTS).read_text())
    except (OSError, ValueError):
        return None
    return Environment(
        python=str(root() / key / "bin" / "python"),
        key=key,
        wheels=tuple(facts["wheels"]),
        freeze=facts["freeze"],
        facts=facts,
    )


def build(key: str, wheels: Sequence[Artifact]) -> Environment:
    """Make the environment of `key` from `wheels` (the caller holds the key's lock)."""
    files = [fetch(artifact) for artifact in wheels]
    partial = root() / f"{key}.partial"
    shutil.rmtree(partial, ignore_errors=True)  # a build that died half-way
    python = partial / "bin" / "python"
    names = ", ".join(f"{a.name} {a.version} (sha256 {a.sha256})" for a in wheels)
    uv(["venv", "--quiet", "--relocatable", "--python", sys.executable, str(partial)],
       f"could not create the environment {key[:12]}")  # fmt: skip
    # Compiled once here: test processes may not write bytecode (PYTHONDONTWRITEBYTECODE),
    # and torch's test machinery imports in a third of the time from it.
    install = ["pip", "install", "--quiet", "--no-deps", "--compile-bytecode"]
    install += ["--python", str(python)]
    if settings.CRCR_PACKAGE_INDEX:
        install += ["--index-url", settings.CRCR_PACKAGE_INDEX]
    install += [*map(str, files), "-r", str(settings.CRCR_TEST_REQUIREMENTS)]
    uv(install, f"the environment {key[:12]} could not be built from {names}")
    freeze = uv(["pip", "freeze", "--python", str(python)], "could not list the environment")
    facts = {
        "key": key,
        "python_version": platform.python_version(),
        "wheels": [
            {
                "kind": a.kind,
                "name": a.name,
                "version": a.version,
                "sha256": a.sha256,
                "file": path.name,
            }
            for a, path in zip(wheels, files, strict=True)
        ],  # fmt: skip
        "requirements_sha256": requirements_sha256(),
        "freeze": freeze,
        "bytes": folder_bytes(partial),
        "host": socket.gethostname(),
        "built_at": timezone.now().isoformat(),
    }
    (partial / FACTS).write_text(json.dumps(facts, indent=2, sort_keys=True))
    shutil.rmtree(root() / key, ignore_errors=True)
    partial.rename(root() / key)
    environment = load(key)
    assert environment is not None
    return environment


def fetch(artifact: Artifact) -> Path:
    """The artifact's wheel in this host's cache, fetched from storage and checked."""
    # The wheel's own name (installers read its tags): storage may have mangled it ("+").
    name = artifact.location.removeprefix("build:") or Path(str(artifact.file.name)).name
    target = root() / WHEELS / artifact.sha256 / Path(name).name
    if target.is_file() and sha256_file(target) == artifact.sha256:
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_suffix(".partial")
    what = f"artifact {artifact.name} {artifact.version} (sha256 {artifact.sha256})"
    try:
        with artifact.file.open("rb") as stream, partial.open("wb") as out:
            shutil.copyfileobj(stream, out, 1 << 20)
    except Exception as error:  # any storage backend's own error: missing, unreachable
        partial.unlink(missing_ok=True)
        raise ArtifactError(f"{what} could not be fetched from storage: {error}") from None
    found = sha256_file(partial)
    if found != artifact.sha256:
        partial.unlink()
        raise ArtifactError(f"{what} is corrupt in storage: its content hashes to {found}")
    partial.rename(target)
    return target


def uv(args: list[str], failure: str) -> str:
    """Run uv with this host's cache; ArtifactError with its output when it fails."""
    from uv import find_uv_bin

    env = dict(os.environ, UV_CACHE_DIR=str(root() / UV_CACHE), UV_PYTHON_DOWNLOADS="never")
    env.pop("VIRTUAL_ENV", None)
    try:
        completed = subprocess.run(
            [find_uv_bin(), "--no-config", *args], capture_output=True, text=True,
            env=env, timeout=BUILD_TIMEOUT, stdin=subprocess.DEVNULL,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        raise ArtifactError(f"{failure}: uv ran past {BUILD_TIMEOUT} s") from None
    if completed.returncode != 0:
        raise ArtifactError(f"{failure}: {(completed.stderr or completed.stdout).strip()[-2000:]}")
    return completed.stdout


def folder_bytes(folder: Path) -> int:
    return sum(
        (Path(path) / name).lstat().st_size for path, _, names in os.walk(folder) for name in names
    )


def cached() -> list[tuple[float, int, str]]:
    """Every ready environment here: (last use, bytes, key)."""
    found = []
    for facts in root().glob(f"*/{FACTS}"):
        try:
            size = int(json.loads(facts.read_text())["bytes"])
            found.append((facts.stat().st_mtime, size, facts.parent.name))
        except (OSError, ValueError, KeyError):
            continue
    return sorted(found)


def evict(keep: str) -> list[str]:
    """Remove the least recently used environments past the cap; returns their keys."""
    entries = cached()
    total = sum(size for _, size, _ in entries)
    cap = settings.CRCR_ENV_CACHE_GB * 1024**3
    removed = []
    for _, size, key in entries:
        if total <= cap:
            break
        if key == keep:
            continue
        with (root() / f"{key}.lock").open("a") as lock:
            # Concurrency guard: an environment in use holds its lock shared; skip it.
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue
            shutil.rmtree(root() / key, ignore_errors=True)
        total -= size
        removed.append(key)
    if removed:
        prune_wheels()
    return removed


def prune_wheels() -> None:
    """Drop cached wheels no remaining environment was built from."""
    used: set[str] = set()
    for facts in root().glob(f"*/{FACTS}"):
        try:
            used.update(wheel["sha256"] for wheel in json.loads(facts.read_text())["wheels"])
        except (OSError, ValueError, KeyError):
            continue
    # A wheel fetched in the last hour may be a build's in progress (under its own lock).
    recent = time.time() - 3600
    for folder in (root() / WHEELS).glob("*"):
        if folder.name not in used and folder.stat().st_mtime < recent:
            shutil.rmtree(folder, ignore_errors=True)
