"""The upstream resolver: one interface over a local PyTorch clone or GitHub's REST API.

It answers the questions the gate and the triggers ask of upstream PyTorch: the
head of a branch, whether a PR has landed, the source commit of a nightly, and
the commits between two SHAs (for bisecting).
"""

import http.client
import json
import os
import re
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from django.conf import settings

SHA_RE = re.compile(r"^[0-9a-f]{40}$")
# The nightly branch's head commit message names its source: "… (<40-hex sha>)".
NIGHTLY_SOURCE_RE = re.compile(r"\(([0-9a-f]{40})\)")
BRANCH_RE = re.compile(r"^(main|master|nightly|viable/strict|release/\d+\.\d+)$")
CLONE = "the PyTorch clone (CRCR_UPSTREAM)"


class UpstreamError(Exception):
    """Upstream could not answer; the message says what was asked and why."""


class RateLimitedError(UpstreamError):
    def __init__(self, message: str, retry_after: float) -> None:
        super().__init__(message)
        self.retry_after = retry_after


class Resolver(Protocol):
    def branch_head(self, branch: str) -> str: ...
    def pr_landed(self, number: int, base: str) -> bool: ...
    def commit_message(self, sha: str) -> str: ...
    def commits_between(self, good: str, bad: str) -> list[str]: ...


def nightly_source_sha(resolver: Resolver) -> str:
    """The PyTorch commit a nightly was built from, from the nightly head's message."""
    head = resolver.branch_head("nightly")
    return nightly_source(head, resolver.commit_message(head))


def nightly_source(head: str, message: str) -> str:
    """The source commit a nightly commit's message names (a 40-hex SHA in parentheses)."""
    match = NIGHTLY_SOURCE_RE.search(message)
    if match is None:
        first_line = message.strip().splitlines()[0] if message.strip() else "(empty)"
        raise UpstreamError(
            f"the nightly head {head[:12]} names no source commit: its message "
            f"{first_line!r} has no 40-hex SHA in parentheses"
        )
    return match.group(1)


def validate_branch(branch: str) -> str:
    if not BRANCH_RE.match(branch):
        raise UpstreamError(
            f"{branch!r} is not a branch crcr builds (main, nightly, viable/strict, release/X.Y)"
        )
    return branch


@dataclass
class LocalGitResolver:
    """Answers from a PyTorch clone on disk (its local branches or origin's). Its errors
    call it "the PyTorch clone": they are shown on pages, where a server path is not."""

    path: Path

    def _git(self, *args: str) -> str:
        completed = subprocess.run(
            ["git", "-C", str(self.path), *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if completed.returncode != 0:
            said = completed.stderr.strip()
            for root in sorted({str(self.path), os.path.realpath(self.path)}, key=len)[::-1]:
                said = said.replace(root, CLONE)
            raise UpstreamError(f"git {' '.join(args)} failed in {CLONE}: {said}")
        return completed.stdout

    def branch_head(self, branch: str) -> str:
        validate_branch(branch)
        for ref in (f"refs/heads/{branch}", f"refs/remotes/origin/{branch}"):
            try:
                return self._git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}").strip()
            except UpstreamError:
                continue
        raise UpstreamError(f"branch {branch!r} does not exist in {CLONE}")

    def pr_landed(self, number: int, base: str) -> bool:
        # PyTorch's merge bot writes "Pull Request resolved: …/pull/N" into the
        # landed commit; a manual merge keeps "(#N)" in the subject.
        head = self.branch_head(base)
        pattern = rf"(Pull Request resolved: \S+/pull/{number}\b|\(#{number}\))"
        found = self._git("log", "--max-count=1", "-E", f"--grep={pattern}", "--format=%H", head)
        return bool(found.strip())

    def commit_message(self, sha: str) -> str:
        return self._git("log", "-1", "--format=%B", sha)

    def commits_between(self, good: str, bad: str) -> list[str]:
        """Commits after `good` up to and including `bad`, oldest first."""
        out = self._git("rev-list", "--reverse", "--first-parent", f"{good}..{bad}")
        return out.split()


@dataclass
class GitHubResolver:
    """Answers from GitHub's REST API, within its rate limits and with timeouts."""

    repository: str = "pytorch/pytorch"
    token: str | None = None
    api_url: str = "https://api.github.com"
    timeout: float = 20

    def _get(self, path: str) -> Any:
        request = urllib.request.Request(f"{self.api_url}/repos/{self.repository}{path}")
        request.add_header("Accept", "application/vnd.github+json")
        request.add_header("X-GitHub-Api-Version", "2022-11-28")
        if self.token:
            request.add_header("Authorization", f"Bearer {self.token}")
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:
                return json.load(response)
        except urllib.error.HTTPError as error:
            raise self._http_error(path, error) from None
        except (OSError, http.client.HTTPException) as error:
            # Refused, reset, timed out or cut short: the gate retries with backoff.
            reason = getattr(error, "reason", None) or error or type(error).__name__
            raise UpstreamError(f"GitHub {path} could not be reached: {reason}") from None
        except ValueError as error:
            raise UpstreamError(
                f"GitHub {path} answered something that is not JSON: {error}"
            ) from None

    def _http_error(self, path: str, error: urllib.error.HTTPError) -> UpstreamError:
        remaining = error.headers.get("X-RateLimit-Remaining")
        if error.code == 429 or (error.code == 403 and remaining == "0"):
            reset = float(error.headers.get("X-RateLimit-Reset") or 0)
            retry_after = float(error.headers.get("Retry-After") or max(reset - time.time(), 60))
            return RateLimitedError(f"GitHub rate limit reached on {path}", retry_after)
        return UpstreamError(f"GitHub {path} answered {error.code}: {error.reason}")

    def _field(self, path: str, *keys: str) -> Any:
        """A field of GitHub's answer; an answer without it is GitHub's error, not ours."""
        value = self._get(path)
        for key in keys:
            if not isinstance(value, dict) or key not in value:
                raise UpstreamError(f"GitHub {path} answered without {'.'.join(keys)}")
            value = value[key]
        return value

    def branch_head(self, branch: str) -> str:
        validate_branch(branch)
        return str(self._field(f"/branches/{branch}", "commit", "sha"))

    def pr_landed(self, number: int, base: str) -> bool:
        pull = self._get(f"/pulls/{number}")
        if not isinstance(pull, dict):
            raise UpstreamError(f"GitHub /pulls/{number} answered without a pull request")
        labels = {label["name"] for label in pull.get("labels", [])}
        return "Merged" in labels or bool(pull.get("merged"))

    def commit_message(self, sha: str) -> str:
        return str(self._field(f"/commits/{sha}", "commit", "message"))

    def commits_between(self, good: str, bad: str) -> list[str]:
        compare = self._get(f"/compare/{good}...{bad}")
        return [commit["sha"] for commit in compare.get("commits", [])]


def get_resolver() -> Resolver:
    """The resolver named by CRCR_UPSTREAM: `git:<path>` or `github:<owner/name>`."""
    kind, _, target = settings.CRCR_UPSTREAM.partition(":")
    if kind == "git":
        return LocalGitResolver(Path(target))
    token = settings.CRCR_GITHUB_TOKEN
    return GitHubResolver(repository=target, token=token, api_url=settings.CRCR_GITHUB_API_URL)
