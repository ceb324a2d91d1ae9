"""The test tree of a run: PyTorch's `test/` folder at the run's SHA.

With a PyTorch clone (TORCH_ROOT is a git checkout), each SHA gets a detached
git worktree under this host's work folder, prepared once and shared by the run's
shards, and pruned by age. Without one, the bundled upstream-style tree is used.

Hosts without TORCH_ROOT (a device host with no PyTorch clone) take the tree from
storage: the host that creates the run publishes its `test/` folder and top-level
files there (`publish`, on the `default` queue, before planning), as
`trees/<test suite>.tar.gz`, and `tree_for_run` unpacks it once per host.
"""

import fcntl
import shutil
import subprocess
import tarfile
import tempfile
import time
from pathlib import Path

from django.conf import settings
from django.core.files.storage import default_storage

from runs import workfiles
from runs.models import Run

WORKTREES = "worktrees"
TREES = "trees"


class TestTreeError(Exception):
    __test__ = False


def tree_for(pytorch_sha: str) -> Path:
    """The folder that plays ${TORCH_ROOT} for this SHA (it holds `test/`)."""
    root = Path(settings.CRCR_TORCH_ROOT)
    if not (root / ".git").exists():
        if not (root / "test").is_dir():
            raise TestTreeError(f"TORCH_ROOT {root} has no test/ folder")
        return root
    target = workfiles.work_root() / WORKTREES / pytorch_sha
    target.parent.mkdir(parents=True, exist_ok=True)
    # One preparer per SHA across processes on this host: the others wait and reuse it.
    with open(target.parent / f"{pytorch_sha}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / "test").is_dir():
            _git(root, "worktree", "prune")
            _git(root, "worktree", "add", "--detach", "--force", str(target), pytorch_sha)
    target.touch()  # its mtime says when it was last used, for pruning
    return target


def archive_name(run: Run) -> str:
    return f"{TREES}/{run.test_suite_sha}.tar.gz"


def local_tree(run: Run, published: bool) -> Path | None:
    """The run's tree from this host's TORCH_ROOT, or None when this host has it not (or,
    when the run's tree is `published`, has a plain folder holding another suite)."""
    from runs.combinations import test_suite_sha

    try:
        tree = tree_for(run.pytorch_sha)
    except TestTreeError:
        return None
    if published and test_suite_sha(run.pytorch_sha) != run.test_suite_sha:
        return None
    return tree


def tree_for_run(run: Run) -> Path:
    """The folder that plays ${TORCH_ROOT} for the run on this host: from TORCH_ROOT, or
    unpacked from storage once per host."""
    name = archive_name(run)
    published = not workfiles.in_storage() and default_storage.exists(name)
    tree = local_tree(run, published)
    if tree is not None:
        return tree
    target = workfiles.work_root() / TREES / run.test_suite_sha
    target.parent.mkdir(parents=True, exist_ok=True)
    # One unpacker per tree across processes on this host: the others wait and reuse it.
    with open(target.parent / f"{run.test_suite_sha}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / "test").is_dir():
            if not published:
                raise TestTreeError(
                    f"this host has no test tree at {run.pytorch_sha[:12]} (TORCH_ROOT "
                    f"{settings.CRCR_TORCH_ROOT}) and storage has no {name}"
                )
            unpack(name, target)
    target.touch()
    return target


def unpack(name: str, target: Path) -> None:
    partial = target.with_name(f"{target.name}.partial")
    shutil.rmtree(partial, ignore_errors=True)
    with tempfile.TemporaryDirectory(prefix="crcr-tree-") as scratch:
        archive = workfiles.download(name, Path(scratch) / "tree.tar.gz")
        with tarfile.open(archive) as tar:
            tar.extractall(partial, filter="data")  # no links out, no absolute paths
    shutil.rmtree(target, ignore_errors=True)
    partial.rename(target)


def publish(run: Run) -> str | None:
    """Put the run's test tree in storage for hosts without TORCH_ROOT (once per suite):
    its `test/` folder and the top-level files pytest reads. None when nothing is needed
    (one host) or it is there already."""
    name = archive_name(run)
    if workfiles.in_storage() or default_storage.exists(name):
        return None
    tree = tree_for(run.pytorch_sha)
    with tempfile.TemporaryDirectory(prefix="crcr-tree-") as scratch:
        archive = Path(scratch) / "tree.tar.gz"
        with tarfile.open(archive, "w:gz") as tar:
            for path in sorted(tree.iterdir()):
                if path.name == "test" or (path.is_file() and not path.is_symlink()):
                    tar.add(path, arcname=path.name, filter=_without_caches)
        return workfiles.save(name, archive)


def _without_caches(member: tarfile.TarInfo) -> tarfile.TarInfo | None:
    parts = Path(member.name).parts
    return None if "__pycache__" in parts or member.name.endswith(".pyc") else member


def prune(max_age_days: float) -> list[Path]:
    """Remove worktrees unused for `max_age_days`; returns what was removed."""
    folder = workfiles.work_root() / WORKTREES
    removed = []
    cutoff = time.time() - max_age_days * 86400
    for tree in folder.glob("*") if folder.is_dir() else []:
        if tree.is_dir() and tree.stat().st_mtime < cutoff:
            shutil.rmtree(tree)
            tree.with_suffix(".lock").unlink(missing_ok=True)
            removed.append(tree)
    if removed and (Path(settings.CRCR_TORCH_ROOT) / ".git").exists():
        _git(Path(settings.CRCR_TORCH_ROOT), "worktree", "prune")
    return removed


def _git(root: Path, *args: str) -> None:
    completed = subprocess.run(
        ["git", "-C", str(root), *args], capture_output=True, text=True, timeout=600
    )
    if completed.returncode != 0:
        raise TestTreeError(f"git {' '.join(args)} failed: {completed.stderr.strip()}")
