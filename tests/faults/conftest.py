"""Fixtures of the fault tests: a backend with a config."""

import pytest

from tests.factories import make_backend, make_config


@pytest.fixture
def backend(db):
    backend = make_backend("acme")
    make_config(backend)
    return backend
