"""What goes into a repro bundle, written into a folder by `assemble`.

metadata.json             everything recorded (reproducibility.metadata)
config.yaml               the config version's full text
plan.json                 the shard plan with estimates, and how each shard ran
results/shard-N/attempt-M/pNNN.{ids,junit.xml,progress.jsonl,log}
requirements.txt          `pip freeze` of the tests' environment, to rebuild it
tree/                     crcr's bundled test tree, when the run used it
artifacts/                the wheels, only when asked for (else referenced)
attestation.intoto.json   an in-toto test-result statement
reproduce                 the script (reproducibility/reproduce.py)
README.md                 how to use all of the above
"""

import hashlib
import json
import os
import shutil
from collections import Counter
from pathlib import Path, PurePosixPath
from typing import Any

from django.core.files.storage import default_storage

from reproducibility import attestation
from reproducibility import metadata as run_metadata
from reproducibility.models import Bundle
from reproducibility.reproduce import tree_fingerprint
from runs import workfiles
from runs.models import Run

RESULT_SUFFIXES = (".ids", ".junit.xml", ".progress.jsonl", ".log")
SCRIPT = Path(__file__).with_name("reproduce.py")
TORCH_INDEX = "https://download.pytorch.org/whl/"


def assemble(bundle: Bundle, folder: Path) -> list[str]:
    """Write every file of the bundle into `folder`; returns warnings for the manifest."""
    run = bundle.run
    meta = run_metadata.metadata(run)
    warnings = copy_tree(meta, folder) + copy_artifacts(meta, folder, bundle.include_artifacts)
    write_json(folder / "metadata.json", meta)
    (folder / "config.yaml").write_text(meta["config"]["text"])
    write_json(folder / "plan.json", {"plan": meta["plan"], "shards": meta["shards"]})
    warnings += copy_results(run, folder / "results")
    (folder / "requirements.txt").write_text(requirements(meta))
    write_json(folder / "attestation.intoto.json", attestation.statement(meta))
    shutil.copyfile(SCRIPT, folder / "reproduce")
    (folder / "reproduce").chmod(0o755)
    (folder / "README.md").write_text(readme(meta, warnings))
    return warnings


def write_json(path: Path, data: Any) -> None:
    path.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def copy_results(run: Run, target: Path) -> list[str]:
    """Each pytest process's files, as crash pinning left them per shard and claim, from
    storage: the device hosts sent them there (runs.workfiles)."""
    prefix = f"runs/{run.uuid}"
    local = workfiles.local_storage_root()
    if local is not None:
        return copy_local_results(local / prefix, target)
    for name in workfiles.listed(prefix):
        relative = PurePosixPath(name).relative_to(prefix)
        shard, attempt = relative.parts[0], relative.parts[1] if len(relative.parts) > 1 else ""
        if (len(relative.parts) == 3 and shard.startswith("shard-") and ".." not in relative.parts
                and attempt.startswith("attempt-") and name.endswith(RESULT_SUFFIXES)):  # fmt: skip
            workfiles.download(name, target / relative)
    return []


def copy_local_results(workdir: Path, target: Path) -> list[str]:
    """copy_results from a file system storage on this host.

    Test code can write into these folders (its TMPDIR is beside them), so a
    symbolic link is never followed: it is left out and named in a warning,
    and nothing outside the run's own folder is read."""
    warnings = []
    for source in sorted(workdir.glob("shard-*/attempt-*/*")):
        relative = source.relative_to(workdir)
        link = next(
            (p for p in (source, source.parent, source.parent.parent) if p.is_symlink()), None
        )
        if link is not None:
            shown = link.relative_to(workdir).as_posix()
            warning = f"results/{shown}: a symbolic link to {os.readlink(link)}, not followed"
            warnings += [] if warning in warnings else [warning]
        elif source.is_file() and source.name.endswith(RESULT_SUFFIXES):
            destination = target / relative
            destination.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, destination, follow_symlinks=False)
    return warnings


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


def requirements(meta: dict[str, Any]) -> str:
    """The worker's `pip freeze`, the most common one when workers differ."""
    freezes = Counter(env["pip_freeze"] for env in meta["environments"] if env["pip_freeze"])
    crcr = meta["crcr"]
    lines = [
        f"# Requirements of crcr run {meta['run']['uuid']} (pip freeze of its worker).",
        f"# crcr {crcr.get('version', '')} at commit {crcr.get('commit') or 'unknown'}"
        f"{' (with local changes)' if crcr.get('dirty') else ''}; checkout {crcr.get('checkout')}",
    ]
    if not freezes:
        lines.append("# No worker environment was recorded for this run.")
    freeze = freezes.most_common(1)[0][0] if freezes else ""
    for line in freeze.splitlines():
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
by the Python that runs pytest: `pip install -e <crcr checkout>` at commit
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
