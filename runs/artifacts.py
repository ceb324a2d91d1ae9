"""Build once, test many: the artifacts of a combination, registered once by SHA-256.

Building PyTorch is out of scope on these machines: by default the installed
torch distribution is registered (its identity is the SHA-256 of its RECORD,
which lists every installed file with its own hash) and the backend is
registered from its module's source files. A build command
(CRCR_BUILD_COMMAND) can produce wheels instead; they are stored and every
consumer verifies them by hash.
"""

import hashlib
import importlib.metadata
import importlib.util
import os
import re
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from crcr_reuse.launcher import die_with_parent, kill
from django.conf import settings
from django.core.files import File

from runs.excerpts import clip
from runs.models import Artifact, Backend

# How often a running build's last line is reported (seconds).
BUILD_POLL_SECONDS = 2


class ArtifactError(Exception):
    """An artifact that cannot be built, found or verified; the message says which."""


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def locate_module(name: str) -> Path:
    """The source folder or file of a module, found without importing it.

    The top-level package is looked up by the import system's finders (so an editable
    install's finder counts, as for the engine's `pip install -e ./engine`), without
    running it; the rest of the dotted name is walked on disk from there.
    """
    top, *rest = name.split(".")
    try:
        spec = importlib.util.find_spec(top)
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        roots = [Path(location) for location in spec.submodule_search_locations]
    elif spec is not None and spec.origin and not rest:
        return Path(spec.origin)
    else:
        roots = []
    relative = Path(*rest) if rest else Path()
    for root in roots:
        for candidate in (root / relative / "__init__.py", root / f"{relative}.py"):
            if candidate.is_file():
                return candidate.parent if candidate.name == "__init__.py" else candidate
    raise ArtifactError(f"module {name!r} is not on the Python path")


def fingerprint(path: Path) -> str:
    """SHA-256 over a source file or a folder's .py files (names and contents)."""
    if path.is_file():
        return sha256_file(path)
    digest = hashlib.sha256()
    for source in sorted(path.rglob("*.py")):
        digest.update(str(source.relative_to(path)).encode() + b"\0")
        digest.update(source.read_bytes())
    return digest.hexdigest()


def _installed_record(distribution: str) -> tuple[str, str, str]:
    try:
        dist = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        raise ArtifactError(f"{distribution} is not installed") from None
    record = dist.read_text("RECORD") or ""
    location = str(dist.locate_file(""))
    return dist.version, hashlib.sha256(record.encode()).hexdigest(), location


def register_installed_torch() -> Artifact:
    version, sha, location = _installed_record("torch")
    artifact, _ = Artifact.objects.get_or_create(
        sha256=sha,
        defaults={
            "kind": Artifact.Kind.PYTORCH,
            "name": "torch",
            "version": version,
            "location": f"installed:{location}",
        },
    )
    return artifact


def register_backend_source(backend: Backend) -> Artifact:
    path = locate_module(backend.device_module)
    artifact, _ = Artifact.objects.get_or_create(
        sha256=fingerprint(path),
        defaults={
            "kind": Artifact.Kind.BACKEND,
            "name": backend.device_module,
            "version": backend.version,
            "location": f"source:{path}",
        },
    )
    return artifact


def build(
    pytorch_sha: str,
    backend: Backend,
    version: str,
    log: Path,
    progress: Callable[[str], object] = lambda line: None,
) -> list[Artifact]:
    """Run the configured build command and store each wheel it writes, once by hash.

    Its output goes to `log` (kept with the run); `progress` gets the log's last line
    every few seconds. A command running past CRCR_BUILD_TIMEOUT is killed with its children.
    """
    command = settings.CRCR_BUILD_COMMAND
    if not command:
        raise ArtifactError("CRCR_BUILD_COMMAND is not set")
    with tempfile.TemporaryDirectory(prefix="crcr-build-") as out:
        env = os.environ | {
            "CRCR_PYTORCH_SHA": pytorch_sha,
            "CRCR_BACKEND_VERSION": version,
            "CRCR_OUTPUT_DIR": out,
        }
        with log.open("wb") as output:
            process = subprocess.Popen(
                command, shell=True, env=env, stdout=output, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, start_new_session=True, preexec_fn=die_with_parent,
            )  # fmt: skip
        deadline = time.monotonic() + settings.CRCR_BUILD_TIMEOUT
        while process.poll() is None:
            if time.monotonic() > deadline:
                kill(process)
                raise ArtifactError(
                    f"the build command ran past CRCR_BUILD_TIMEOUT "
                    f"({settings.CRCR_BUILD_TIMEOUT} s) and was stopped:\n{tail(log)}"
                )
            progress(last_line(log))
            time.sleep(BUILD_POLL_SECONDS)
        if process.returncode != 0:
            raise ArtifactError(
                f"the build command failed (exit {process.returncode}):\n{tail(log)}"
            )
        wheels = sorted(Path(out).glob("*.whl"))
        if not wheels:
            raise ArtifactError(
                f"the build command wrote no wheel into $CRCR_OUTPUT_DIR:\n{tail(log)}"
            )
        return [_store_wheel(wheel, backend) for wheel in wheels]


def tail(log: Path, size: int = 3000) -> str:
    """The end of a log, as text."""
    with log.open("rb") as stream:
        stream.seek(max(0, log.stat().st_size - size))
        return stream.read().decode(errors="replace").strip()


def last_line(log: Path) -> str:
    lines = tail(log, 400).splitlines()
    return clip(lines[-1], 200) if lines else ""


def normalized(name: str) -> str:
    """A distribution's name as wheel file names spell it (PEP 427)."""
    return re.sub(r"[-_.]+", "_", name).lower()


def _store_wheel(wheel: Path, backend: Backend) -> Artifact:
    """Store a built wheel once by hash. The backend's wheel is the one named after its
    device module's top-level package; torch and its companions are PyTorch's."""
    sha = sha256_file(wheel)
    existing = Artifact.objects.filter(sha256=sha).first()
    if existing:
        return existing
    name, version = wheel.name.split("-")[:2]
    is_backend = normalized(name) == normalized(backend.device_module.split(".")[0])
    artifact = Artifact(
        kind=Artifact.Kind.BACKEND if is_backend else Artifact.Kind.PYTORCH,
        name=name,
        version=version,
        sha256=sha,
        size=wheel.stat().st_size,
        location=f"build:{wheel.name}",
    )
    with wheel.open("rb") as stream:
        artifact.file.save(f"{sha}/{wheel.name}", File(stream), save=False)
    artifact.save()
    return artifact


def artifacts_for(
    pytorch_sha: str,
    backend: Backend,
    version: str,
    log: Path,
    progress: Callable[[str], object] = lambda line: None,
) -> list[Artifact]:
    """The artifacts of one combination: built by the command, or the installed ones."""
    if settings.CRCR_BUILD_COMMAND:
        return build(pytorch_sha, backend, version, log, progress)
    return [register_installed_torch(), register_backend_source(backend)]


def verify(artifact: Artifact) -> None:
    """Check that what a consumer is about to use is exactly the registered artifact."""
    if artifact.file:
        with artifact.file.open("rb") as stream:
            digest = hashlib.sha256(stream.read()).hexdigest()
    elif artifact.location.startswith("installed:"):
        digest = _installed_record(artifact.name)[1]
    else:
        digest = fingerprint(Path(artifact.location.removeprefix("source:")))
    if digest != artifact.sha256:
        raise ArtifactError(
            f"artifact {artifact.name} {artifact.version} does not match its hash: "
            f"registered {artifact.sha256[:16]}…, found {digest[:16]}…"
        )
