"""Corrupt or truncated reports are refused whole, naming the file and where it broke;
a shard is never half-ingested."""

import sys
import textwrap
from pathlib import Path

import pytest
from crcr_reuse.launcher import PytestRun, TestEnvironment
from crcr_reuse.outcomes import ReportError, read_progress

from runs import ingest
from runs.crash_pinning import Executor, ShardSpec
from runs.models import Run, Shard, Trigger
from runs.report_files import check_junit, parse_junit
from tests.factories import make_backend, make_config

ROOT = Path(__file__).resolve().parents[2]


def junit(path: Path, cases: int, *, cut: int = 0) -> Path:
    text = (
        '<?xml version="1.0"?><testsuites><testsuite name="pytest">'
        + "".join(
            f'<testcase classname="test.test_ops.TestOpsPRIVATEUSE1" name="test_add_{n}" time="0.1">'
            + ('<failure message="boom">trace</failure>' if n % 7 == 0 else "")
            + "</testcase>"
            for n in range(cases)
        )
        + "</testsuite></testsuites>"
    )
    path.write_text(text[: len(text) - cut] if cut else text)
    return path


@pytest.fixture
def shard(db):
    backend = make_backend("reports")
    trigger = Trigger.objects.create(backend=backend, kind="manual", pytorch_sha="0" * 40)
    run = Run.objects.create(
        trigger=trigger, backend=backend, job_name="reports", backend_version="0",
        pytorch_sha="0" * 40, test_suite_sha="0" * 40, config_version=make_config(backend),
    )  # fmt: skip
    return Shard.objects.create(run=run, index=0, test_ids=[])


def test_a_whole_junit_file_is_stored_once_however_often_it_is_ingested(shard, tmp_path):
    path = junit(tmp_path / "p001.junit.xml", 300)
    assert ingest.ingest_junit(shard, path) == 300
    assert ingest.ingest_junit(shard, path) == 0  # a redelivered report adds nothing
    assert shard.results.count() == 300
    assert shard.results.filter(outcome="failed").count() == 43


def test_a_truncated_junit_file_is_refused_whole_with_where_it_broke(shard, tmp_path):
    path = junit(tmp_path / "p001.junit.xml", 3000, cut=40)
    with pytest.raises(ReportError, match=r"p001.junit.xml: not well-formed XML at line 1, col"):
        ingest.ingest_junit(shard, path)
    # The cases before the break had been streamed to the database: none is kept.
    assert shard.results.count() == 0


def test_a_corrupt_progress_line_is_refused_but_a_killed_process_cut_line_is_not(tmp_path):
    path = tmp_path / "p001.progress.jsonl"
    good = '{"node_id": "t.py::test_a", "event": "finish", "outcome": "passed"}\n'
    path.write_text(good + '{"node_id": "t.py::test_b", "event": "fin')
    assert list(read_progress(path, ended=False).records) == ["t.py::test_a"]
    with pytest.raises(ReportError, match="p001.progress.jsonl: line 2 is not a progress entry"):
        read_progress(path, ended=True)
    path.write_text(good + "garbage\n" + good)
    with pytest.raises(ReportError, match="line 2"):
        read_progress(path, ended=False)


def test_a_junit_file_that_lacks_a_finished_test_is_refused(tmp_path):
    path = junit(tmp_path / "p001.junit.xml", 2)
    records = list(parse_junit(path))
    check_junit(path, records)
    (extra := records[0]).node_id = "test/test_ops.py::TestOpsPRIVATEUSE1::test_missing"
    with pytest.raises(ReportError, match="1 finished test.s. missing, the first .*test_missing"):
        check_junit(path, [extra])
    with pytest.raises(ReportError, match="p002.junit.xml: missing although pytest ended"):
        check_junit(tmp_path / "p002.junit.xml", records)


# A conftest that lets the tests run, then cuts the JUnit XML pytest wrote.
CUTS_ITS_REPORT = textwrap.dedent(
    """
    import pytest

    @pytest.hookimpl(trylast=True)
    def pytest_unconfigure(config):
        path = config.option.xmlpath
        text = open(path).read()
        open(path, "w").write(text[: len(text) // 2])
    """
)


def test_a_pytest_that_wrote_a_broken_report_is_refused_whole(tmp_path):
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "conftest.py").write_text(CUTS_ITS_REPORT)
    (tree / "test_a.py").write_text("def test_one():\n    pass\n\ndef test_two():\n    pass\n")
    spec = ShardSpec(
        ids=["test_a.py::test_one", "test_a.py::test_two"],
        workdir=tmp_path / "work",
        pytest=PytestRun(
            TestEnvironment(sys.executable, {"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}),
            tree,
            extra_args=["-p", "no:crcr_reuse", "-p", "no:django"],
        ),
        timeout=60,
        test_timeout=30,
    )
    with pytest.raises(ReportError, match="p001.junit.xml: not well-formed XML"):
        Executor(spec, should_retry=lambda record: False).run()
