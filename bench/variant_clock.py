"""A pytest plugin for the benches: each test's whole run (setup, call, teardown, the
reports and every plugin's hooks around them) and outcome, written as JSON at the end.

    PYTHONPATH=bench pytest -p variant_clock ...   # CRCR_BENCH_CLOCK=out.json
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Generator
from typing import Any

import pytest

ENV_OUT = "CRCR_BENCH_CLOCK"
_seconds: dict[str, float] = {}
_outcomes: dict[str, str] = {}


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: Any) -> Generator[None, Any, Any]:
    started = time.perf_counter()
    try:
        return (yield)
    finally:
        _seconds[item.nodeid] = time.perf_counter() - started


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.when == "call" or report.outcome != "passed":
        # A failed setup or teardown, or the call's own outcome, is the test's.
        _outcomes.setdefault(
            report.nodeid, "xfail" if hasattr(report, "wasxfail") else report.outcome
        )


def pytest_sessionfinish(session: pytest.Session) -> None:
    path = os.environ.get(ENV_OUT)
    if path:
        tests = {
            name: [seconds, _outcomes.get(name, "passed")] for name, seconds in _seconds.items()
        }
        with open(path, "w") as out:
            json.dump(tests, out)
