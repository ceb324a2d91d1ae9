import json
import urllib.error
import urllib.request
from typing import Any

import pytest

from demo.localgit import PyTorchShapedRepo
from tests.factories import make_backend, make_config


@pytest.fixture
def upstream(tmp_path, settings) -> PyTorchShapedRepo:
    """A local PyTorch-shaped repository the resolver reads (main, release/2.14, nightly)."""
    repo = PyTorchShapedRepo(tmp_path / "pytorch")
    repo.commit("release/2.14", "[release/2.14] Bump version")
    repo.commit("main", "Unrelated change (#100)")
    settings.CRCR_UPSTREAM = f"git:{repo.path}"
    return repo


@pytest.fixture
def backend(db):
    backend = make_backend(
        "acme", tracked_release="release/2.14", gate_policy={"recheck_delay_seconds": 1}
    )
    make_config(backend)
    return backend


class Http:
    """A tiny HTTP client for a live server: JSON in, (status, JSON) out."""

    def __init__(self, base_url: str, token: str) -> None:
        self.base_url, self.token = base_url, token

    def post(self, path: str, body: Any, headers: dict[str, str] | None = None):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        request = urllib.request.Request(self.base_url + path, data=data, method="POST")
        request.add_header("Content-Type", "application/json")
        request.add_header("Authorization", f"Token {self.token}")
        for name, value in (headers or {}).items():
            request.add_header(name, value)
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                return response.status, json.load(response)
        except urllib.error.HTTPError as error:
            return error.code, json.load(error)


@pytest.fixture
def http(live_server, machine_token) -> Http:
    return Http(live_server.url, machine_token)
