"""pytest plugin entry point (work in progress)."""


def pytest_addoption(parser):
    group = parser.getgroup("crcr-reuse")
    group.addoption("--reuse-config", action="append", default=[])
