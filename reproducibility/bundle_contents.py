"""What goes into a repro bundle, written into its archive by `assemble`.

metadata.json             everything recorded (reproducibility.metadata)
config.yaml               the config version's full text
plan.json                 the shard plan with estimates, and how each shard ran
results/shard-N/attempt-M/pNNN.{ids,junit.xml,progress.jsonl,log}
requirements.txt          the tests' environment, to rebuild it: its `pip freeze` less what
                          the tests do not use (`test_packages`)
tree/                     crcr's bundled test tree, when the run used it
artifacts/                the wheels, only when asked for (else referenced)
attestation.intoto.json   an in-toto test-result statement
reproduce                 the script (reproducibility/reproduce.py)
README.md                 how to use all of the above

Results stream from storage into the archive (`bundle_archive`); only the small test
tree and the wheels asked for pass through the scratch folder first.
"""

import hashlib
import os
import re
import shutil
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path, PurePosixPath
from typing import Any

from django.conf import settings
from django.core.files.storage import default_storage

from reproducibility import attestation
from reproducibility import metadata as run_metadata
from reproducibility.bundle_archive import BundleArchive, Encoded, Part
from reproducibility.models import Bundle
from reproducibility.reproduce import tree_fingerprint
from runs import workfiles
from runs.artifacts import normalized
from runs.models import Run

RESULT_SUFFIXES = (".ids", ".junit.xml", ".progress.jsonl", ".log")
SCRIPT = Path(__file__).with_name("reproduce.py")
TORCH_INDEX = "https://download.pytorch.org/whl/"


def assemble(
    bundle: Bundle, archive: BundleArchive, scratch: Path
) -> tuple[list[str], dict[str, Any]]:
    """Write every file of the bundle into `archive`; the warnings for the manifest and
    the run's metadata. `scratch` is an empty folder to work in.

    The results go into a part of the archive of their own, packed by another thread
    while this one reads the database and writes the documents (file reads, hashing,
    compressing and waiting for the database let go of the GIL)."""
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="bundle-results") as pool:
        packing = pool.submit(add_results, bundle.run, archive.part(), scratch / "download")
        meta, warnings = add_documents(bundle, archive, scratch)
        warnings += packing.result()
    archive.add_bytes("README.md", readme(meta, warnings).encode())
    return warnings, meta


def add_documents(
    bundle: Bundle, archive: BundleArchive, scratch: Path
) -> tuple[dict[str, Any], list[str]]:
    """Everything but the results and the README; the run's metadata and the warnings so
    far. The test tree and the wheels asked for pass through `scratch`."""
    run = bundle.run
    meta = run_metadata.metadata(run, with_attempts=False)
    if bundle.public_url:  # asked from a server: its links point there
        meta["run"]["url"] = run.page_url(bundle.public_url)
    texts, final = run_metadata.attempt_texts(run)
    meta.update(attempts=Encoded(texts), failures=run_metadata.failures(run))
    warnings = copy_tree(meta, scratch) + copy_artifacts(meta, scratch, bundle.include_artifacts)
    for folder in ("tree", "artifacts"):
        if (scratch / folder).is_dir():
            archive.add_folder(folder, scratch / folder)
    archive.add_json("metadata.json", meta)
    archive.add_bytes("config.yaml", meta["config"]["text"].encode())
    archive.add_json("plan.json", {"plan": meta["plan"], "shards": meta["shards"]})
    archive.add_bytes("requirements.txt", requirements(meta).encode())
    archive.add_json("attestation.intoto.json", attestation.statement(meta, final))
    archive.add_file("reproduce", SCRIPT, mode=0o755)
    return meta, warnings


def add_results(run: Run, archive: Part, download: Path) -> list[str]:
    """Each pytest process's files, as crash pinning left them per shard and claim, from
    storage: the device hosts sent them there (runs.workfiles)."""
    prefix = f"runs/{run.uuid}"
    local = workfiles.local_storage_root()
    if local is not None:
        return add_local_results(local / prefix, archive)
    for name in workfiles.listed(prefix):
        relative = PurePosixPath(name).relative_to(prefix)
        shard, attempt = relative.parts[0], relative.parts[1] if len(relative.parts) > 1 else ""
        if (len(relative.parts) == 3 and shard.startswith("shard-") and ".." not in relative.parts
                and attempt.startswith("attempt-") and name.endswith(RESULT_SUFFIXES)):  # fmt: skip
            copy = workfiles.download(name, download / relative)
            archive.add_file(f"results/{relative}", copy)
            copy.unlink()
    return []


def add_local_results(workdir: Path, archive: Part) -> list[str]:
    """add_results from a file system storage on this host, each file read once.

    Test code can write into these folders (its TMPDIR is beside them), so a
    symbolic link is never followed: it is left out and named in a warning,
    and nothing outside the run's own folder is read."""
    warnings = []
    for relative, entry in _result_entries(workdir):
        if entry.is_symlink():
            warnings.append(
                f"results/{relative}: a symbolic link to {os.readlink(entry.path)}, not followed"
            )
        elif entry.name.endswith(RESULT_SUFFIXES) and entry.is_file(follow_symlinks=False):
            archive.add_file(f"results/{relative}", entry.path)
    return warnings


def _result_entries(workdir: Path) -> Iterator[tuple[str, os.DirEntry[str]]]:
    """`shard-*/attempt-*/*` under `workdir` by name, as (relative path, entry); a link
    at any level is yielded, and never entered."""
    levels = ("shard-", "attempt-", "")

    def walk(folder: str, relative: str, depth: int) -> Iterator[tuple[str, os.DirEntry[str]]]:
        try:
            with os.scandir(folder) as listing:
                entries = sorted(listing, key=lambda entry: entry.name)
        except FileNotFoundError:
            return
        for entry in entries:
            if not entry.name.startswith(levels[depth]):
                continue
            path = f"{relative}{entry.name}"
            if entry.is_symlink() or depth == len(levels) - 1:
                yield path, entry
            elif entry.is_dir(follow_symlinks=False):
                yield from walk(entry.path, f"{path}/", depth + 1)

    return walk(str(workdir), "", 0)


def copy_tree(meta: dict[str, Any], folder: Path) -> list[str]:
    """crcr's bundled tree is small: it travels in the bundle. A checkout is referenced."""
    tree = meta["test_tree"]
    if tree.get("kind") != "bundled":
        return []
    source = Path(tree["path"])
    skipped: list[str] = []
    patterns = shutil.ignore_patterns("__pycache__", "*.pyc", ".pytest_cache")

    def ignore(folder_name: str, names: list[str]) -> set[str]:
        # Links are left out and named, never followed (tests run with the tree as cwd).
        links = {name for name in names if os.path.islink(os.path.join(folder_name, name))}
        skipped.extend(
            f"tree/{Path(folder_name, name).relative_to(source).as_posix()}: a symbolic link, "
            "not followed"
            for name in sorted(links)
        )
        return set(patterns(folder_name, names)) | links

    shutil.copytree(source, folder / "tree", ignore=ignore)
    now = tree_fingerprint(folder / "tree")
    tree["bundled"] = "tree/"
    if now != tree.get("fingerprint"):
        return skipped + [f"the bundled test tree changed since the run (now {now[:12]}, "
                f"the run used {str(tree.get('fingerprint'))[:12]}): outcomes may differ"]  # fmt: skip
    return skipped


def copy_artifacts(meta: dict[str, Any], folder: Path, include: bool) -> list[str]:
    """Wheels are referenced by hash and location unless the bundle includes them."""
    warnings = []
    for artifact in meta["artifacts"]:
        artifact["bundled_path"] = ""
        if not include:
            continue
        if not artifact.get("stored_as"):
            warnings.append(
                f"artifact {artifact['name']} is not a stored file ({artifact['location']}): "
                "referenced only"
            )
            continue
        target = folder / "artifacts" / Path(artifact["stored_as"]).name
        target.parent.mkdir(parents=True, exist_ok=True)
        with default_storage.open(artifact["stored_as"], "rb") as stream, target.open("wb") as out:
            shutil.copyfileobj(stream, out)
        if hashlib.sha256(target.read_bytes()).hexdigest() != artifact["sha256"]:
            raise ValueError(f"artifact {artifact['name']} does not match its SHA-256")
        artifact["bundled_path"] = target.relative_to(folder).as_posix()
    return warnings


def _freeze_line(line: str) -> str:
    if line.startswith("-e ") or line.startswith("# Editable"):
        return f"# (crcr, installed by `reproduce --create-env`) {line.lstrip('# ')}"
    if " @ file://" in line:  # a wheel of the combination, on the host that built it
        return f"# (an artifact wheel, installed by `reproduce --create-env`) {line}"
    return line


def _name(line: str) -> str:
    """A `pip freeze` line's distribution, as wheel names spell it ("" for no package)."""
    line = line.strip()
    if not line or line.startswith(("#", "-")):
        return ""
    return normalized(re.split(r"[=<>!~ @;\[]", line, maxsplit=1)[0])


def test_packages(meta: dict[str, Any]) -> set[str]:
    """What a test process of the run uses: the pinned test requirements
    (CRCR_TEST_REQUIREMENTS: pytest, torch's test machinery and torch's dependencies),
    torch and its accelerator packages, the run's wheels and the backend's package."""
    pinned = Path(settings.CRCR_TEST_REQUIREMENTS).read_text().splitlines()
    names = {_name(line) for line in pinned} | {"torch", "triton"}
    names |= {normalized(a["name"].split(".")[0]) for a in meta["artifacts"]}
    names.add(normalized(meta["run"]["backend"]["device_module"].split(".")[0]))
    return names - {""}


def _used(line: str, packages: set[str]) -> bool:
    name = _name(line)
    return not name or name in packages or name.startswith("nvidia_")


def requirements(meta: dict[str, Any]) -> str:
    """The tests' environment as its worker's `pip freeze` (the most common one when
    workers differ) recorded it, less the packages the tests do not use: a worker that
    runs the tests in its own interpreter also holds crcr's and its tools'."""
    freezes = Counter(env["pip_freeze"] for env in meta["environments"] if env["pip_freeze"])
    crcr = meta["crcr"]
    freeze = freezes.most_common(1)[0][0] if freezes else ""
    packages = test_packages(meta)
    kept = [line for line in freeze.splitlines() if _used(line, packages)]
    left_out = len([line for line in freeze.splitlines() if _name(line)]) - len(
        [line for line in kept if _name(line)]
    )
    lines = [
        f"# Requirements of crcr run {meta['run']['uuid']}: its tests' environment (pip freeze "
        f"of its worker, less {left_out} package(s) the tests do not use).",
        f"# crcr {crcr.get('version', '')} at commit {crcr.get('commit') or 'unknown'}"
        f"{' (with local changes)' if crcr.get('dirty') else ''}; checkout {crcr.get('checkout')}",
    ]
    if not freezes:
        lines.append("# No worker environment was recorded for this run.")
    for line in kept:
        if line.startswith("torch==") and "+" in line:
            lines.insert(2, f"--extra-index-url {TORCH_INDEX}{line.rsplit('+', 1)[1]}")
        lines.append(_freeze_line(line))
    for artifact in meta["artifacts"]:
        lines.append(
            f"# artifact {artifact['name']} {artifact['version']} sha256={artifact['sha256']} "
            f"location={artifact['location']}"
        )
    return "\n".join(lines) + "\n"


def readme(meta: dict[str, Any], warnings: list[str]) -> str:
    run = meta["run"]
    tree = meta["test_tree"]
    where = (
        "The test tree is in `tree/`."
        if tree.get("bundled")
        else f"Pass `--torch-root` a PyTorch checkout at {tree.get('sha')}."
    )
    notes = "".join(f"- {warning}\n" for warning in warnings) or "- none\n"
    return f"""# crcr run {run["uuid"]}

Job `{run["job_name"]}` at PyTorch `{run["pytorch_sha"]}`: {run["status"]}.
Page: {run["url"]}

Check every file against `manifest.json`, then re-run (crcr must be importable
by the Python that runs pytest: `pip install <crcr checkout>/engine` at commit
`{meta["crcr"].get("commit") or "unknown"}`, or set `PYTHON`):

    python reproduce --verify
    python reproduce --list
    python reproduce --test '<node id>'
    python reproduce --shard 0
    python reproduce --all
    python reproduce --create-env ./env     # the run's environment (--wheels DIR)

{where} Each re-run writes to `work/<time>/` and compares every test's outcome
and failure category with the recorded ones (exit 0: all the same).

Warnings:
{notes}"""
