"""The test tree of a run: PyTorch's `test/` folder at the run's SHA.

With a PyTorch clone (TORCH_ROOT is a git checkout), each SHA gets a detached
git worktree under the storage root, prepared once and shared by the run's
shards, and pruned by age. Without one, the bundled upstream-style tree is used.
"""

import fcntl
import shutil
import subprocess
import time
from pathlib import Path

from django.conf import settings

WORKTREES = "worktrees"


class TestTreeError(Exception):
    __test__ = False


def tree_for(pytorch_sha: str) -> Path:
    """The folder that plays ${TORCH_ROOT} for this SHA (it holds `test/`)."""
    root = Path(settings.CRCR_TORCH_ROOT)
    if not (root / ".git").exists():
        if not (root / "test").is_dir():
            raise TestTreeError(f"TORCH_ROOT {root} has no test/ folder")
        return root
    target = Path(settings.MEDIA_ROOT) / WORKTREES / pytorch_sha
    target.parent.mkdir(parents=True, exist_ok=True)
    # One preparer per SHA across processes on this host: the others wait and reuse it.
    with open(target.parent / f"{pytorch_sha}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (target / "test").is_dir():
            _git(root, "worktree", "prune")
            _git(root, "worktree", "add", "--detach", "--force", str(target), pytorch_sha)
    target.touch()  # its mtime says when it was last used, for pruning
    return target


def prune(max_age_days: float) -> list[Path]:
    """Remove worktrees unused for `max_age_days`; returns what was removed."""
    folder = Path(settings.MEDIA_ROOT) / WORKTREES
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
