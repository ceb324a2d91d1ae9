"""A test's start reaches the disk before the test runs, with every line before it."""

import json

import pytest
from crcr_reuse import progress_log


def finished(node_id: str) -> pytest.TestReport:
    return pytest.TestReport(
        node_id, ("t.py", 0, node_id), {}, "passed", None, "call", user_properties=[]
    )


def test_each_start_and_what_came_before_it_is_on_disk_before_its_test_runs(tmp_path, monkeypatch):
    path = tmp_path / "progress.jsonl"
    on_disk: list[list[dict]] = []  # the file as each fsync left it on the disk
    monkeypatch.setattr(
        progress_log.os,
        "fsync",
        lambda fd: on_disk.append([json.loads(line) for line in path.read_text().splitlines()]),
    )
    log = progress_log.ProgressLog(str(path))
    for node_id in ("t.py::test_a", "t.py::test_b"):
        log.pytest_runtest_logstart(node_id)
        log.pytest_runtest_logreport(finished(node_id))
    log.pytest_sessionfinish()

    events = [[(line["node_id"], line["event"]) for line in lines] for lines in on_disk]
    assert events == [
        [("t.py::test_a", "start")],
        [("t.py::test_a", "start"), ("t.py::test_a", "finish"), ("t.py::test_b", "start")],
        [("t.py::test_a", "start"), ("t.py::test_a", "finish"), ("t.py::test_b", "start"),
         ("t.py::test_b", "finish")],
    ]  # fmt: skip
