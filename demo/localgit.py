"""A local git repository shaped like PyTorch's branches (main, release/x.y, nightly).

The demo's stand-in for a PyTorch clone, which the local-git resolver reads, and
the tests' upstream.
"""

import subprocess
from pathlib import Path


class PyTorchShapedRepo:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.mkdir(parents=True, exist_ok=True)
        self._git("init", "-q", "-b", "main")
        self._git("config", "user.email", "bot@example.com")
        self._git("config", "user.name", "merge bot")
        (path / "README").write_text("upstream\n")
        self._git("add", "-A")
        self._git("commit", "-q", "-m", "Initial commit")

    def _git(self, *args: str) -> str:
        completed = subprocess.run(
            ["git", "-C", str(self.path), *args], capture_output=True, text=True, check=True
        )
        return completed.stdout.strip()

    def commit(self, branch: str, message: str, files: dict[str, str] | None = None) -> str:
        """Commit on `branch` (created from main's head when new); returns the SHA."""
        if not self._git("branch", "--list", branch):
            self._git("branch", branch, "main")
        self._git("checkout", "-q", branch)
        for name, text in (files or {"CHANGES": message}).items():
            target = self.path / name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        self._git("add", "-A")
        self._git("commit", "-q", "--allow-empty", "-m", message)
        return self.head(branch)

    def land(self, number: int, branch: str = "main", title: str = "Fix something") -> str:
        """A commit as PyTorch's merge bot lands PR `number`."""
        return self.commit(
            branch,
            f"{title} (#{number})\n\n"
            f"Pull Request resolved: https://github.com/pytorch/pytorch/pull/{number}\n",
        )

    def nightly(self, source_sha: str | None) -> str:
        message = "2026-12-01 nightly release"
        return self.commit("nightly", f"{message} ({source_sha})" if source_sha else message)

    def head(self, branch: str) -> str:
        return self._git("rev-parse", branch)
