"""The upstream resolver over a local git repository and over a GitHub-like REST server."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from demo.localgit import PyTorchShapedRepo
from runs.upstream import (
    GitHubResolver,
    LocalGitResolver,
    RateLimitedError,
    UpstreamError,
    nightly_source_sha,
)

SOURCE = "0123456789abcdef0123456789abcdef01234567"


def test_nightly_resolves_to_the_sha_in_the_head_message(tmp_path):
    repo = PyTorchShapedRepo(tmp_path / "pytorch")
    repo.nightly("f" * 40)
    repo.nightly(SOURCE)
    assert nightly_source_sha(LocalGitResolver(repo.path)) == SOURCE


def test_nightly_without_a_source_sha_is_a_clear_error(tmp_path):
    repo = PyTorchShapedRepo(tmp_path / "pytorch")
    repo.nightly(None)
    with pytest.raises(UpstreamError, match="names no source commit.*nightly release"):
        nightly_source_sha(LocalGitResolver(repo.path))


def test_a_missing_branch_is_a_clear_error(tmp_path):
    repo = PyTorchShapedRepo(tmp_path / "pytorch")
    with pytest.raises(UpstreamError, match="release/9.9.*does not exist"):
        LocalGitResolver(repo.path).branch_head("release/9.9")


def test_a_branch_crcr_does_not_build_is_refused(tmp_path):
    repo = PyTorchShapedRepo(tmp_path / "pytorch")
    with pytest.raises(UpstreamError, match="not a branch crcr builds"):
        LocalGitResolver(repo.path).branch_head("--upload-pack=evil")


def test_a_landed_pr_is_found_by_its_merge_bot_trailer(tmp_path):
    repo = PyTorchShapedRepo(tmp_path / "pytorch")
    repo.land(77)
    resolver = LocalGitResolver(repo.path)
    assert resolver.pr_landed(77, "main")
    assert not resolver.pr_landed(7, "main")
    assert not resolver.pr_landed(770, "main")


def test_commits_between_two_shas_are_listed_oldest_first(tmp_path):
    repo = PyTorchShapedRepo(tmp_path / "pytorch")
    good = repo.head("main")
    shas = [repo.land(n) for n in (1, 2, 3)]
    assert LocalGitResolver(repo.path).commits_between(good, shas[-1]) == shas


class FakeGitHub(BaseHTTPRequestHandler):
    """GitHub's REST answers for a few paths; rate-limited after `budget` requests."""

    budget = 3
    seen_auth: list[str] = []

    def do_GET(self):  # noqa: N802 (http.server's naming)
        FakeGitHub.seen_auth.append(self.headers.get("Authorization", ""))
        FakeGitHub.budget -= 1
        if FakeGitHub.budget < 0:
            self.send_response(403)
            self.send_header("X-RateLimit-Remaining", "0")
            self.send_header("X-RateLimit-Reset", "0")
            self.send_header("Retry-After", "42")
            self.end_headers()
            return
        routes = {
            "/repos/pytorch/pytorch/branches/nightly": {"commit": {"sha": "a" * 40}},
            f"/repos/pytorch/pytorch/commits/{'a' * 40}": {
                "commit": {"message": f"2026-12-01 nightly release ({SOURCE})"}
            },
            "/repos/pytorch/pytorch/pulls/5": {"labels": [{"name": "Merged"}], "merged": False},
        }
        if self.path.endswith("/pulls/13"):
            self.connection.close()  # no answer at all: the connection is cut
            return
        if self.path.endswith(f"/commits/{'b' * 40}"):
            self.send_response(200)
            self.end_headers()
            self.wfile.write(b"<html>unicorn</html>")
            return
        body = routes.get(self.path)
        self.send_response(200 if body else 404)
        self.end_headers()
        self.wfile.write(json.dumps(body or {"message": "Not Found"}).encode())

    def log_message(self, *args):
        pass


@pytest.fixture
def github():
    FakeGitHub.budget, FakeGitHub.seen_auth = 3, []
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeGitHub)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()


def test_the_github_resolver_answers_and_respects_the_rate_limit(github):
    resolver = GitHubResolver(token="t0ken", api_url=github)
    assert nightly_source_sha(resolver) == SOURCE
    assert resolver.pr_landed(5, "main")
    assert FakeGitHub.seen_auth == ["Bearer t0ken"] * 3
    with pytest.raises(RateLimitedError) as caught:
        resolver.branch_head("main")
    assert caught.value.retry_after == 42


def test_a_cut_connection_or_an_answer_that_is_not_json_is_an_upstream_error(github):
    # The gate retries an UpstreamError with backoff; anything else would fail it for good.
    resolver = GitHubResolver(api_url=github)
    with pytest.raises(UpstreamError, match="/pulls/13 could not be reached: Remote"):
        resolver.pr_landed(13, "main")
    with pytest.raises(UpstreamError, match="not JSON"):
        resolver.commit_message("b" * 40)


def test_the_github_resolver_reports_an_unknown_branch(github):
    with pytest.raises(UpstreamError, match="answered 404"):
        GitHubResolver(api_url=github).branch_head("release/9.9")
