"""A failed test's log page and a shard's output page, read from the run's storage."""

import re
import subprocess
import sys
import time
from html import escape
from urllib.parse import quote
from xml.sax.saxutils import escape as xml_escape

import boto3
import pytest
from django.core.files.base import ContentFile
from django.core.files.storage import default_storage
from django.db import connection
from django.test.utils import CaptureQueriesContext

from reproducibility import capture, logs, metadata
from runs.models import TestResult
from tests.factories import make_backend, make_config, make_user
from tests.reproducibility.builders import (
    ADDCMUL_TRACE,
    MISMATCH,
    PASSING,
    add_result,
    make_artifact,
    make_run,
    store_shard_output,
)
from tests.waiting import wait_for
from tests.workers import free_port

pytestmark = pytest.mark.django_db


@pytest.fixture
def run(settings, tmp_path):
    settings.MEDIA_ROOT = str(tmp_path / "storage")
    backend = make_backend("acme")
    made = make_run(backend, make_config(backend), status="failed")
    made.artifacts.set([make_artifact()])
    add_result(made, MISMATCH, ["failed", "failed"], "numerical_mismatch", "regression")
    add_result(made, PASSING, ["passed"])
    # What the progress log keeps of a long report: its end, without the frame's head.
    TestResult.objects.filter(node_id=MISMATCH).update(message=ADDCMUL_TRACE.split(">", 1)[1])
    capture.record_run_start(made)
    return made


def signed_in(client):
    client.force_login(make_user("vera"))
    return client


def rows(html: str) -> list[str]:
    return re.findall(r'<tr id="(?:L|T)?(\w+)"(?: class="([^"]*)")?>', html)


def test_a_failed_tests_log_shows_its_whole_trace_with_the_error_line_marked(client, run):
    store_shard_output(run)
    page = signed_in(client).get(f"/runs/{run.uuid}/log/", {"test": MISMATCH})
    html = page.content.decode()
    assert page.status_code == 200
    # The whole report, from the stored JUnit XML: the frame's head the message had lost.
    assert "self = &lt;test_x.TestXPRIVATEUSE1 testMethod=" in html
    marked = re.findall(r'<tr id="failure" class="failing">.*?<td class="src">([^<]*)</td>', html)
    assert marked == ["E       AssertionError: Tensor-likes are not close!"]
    # The error, up top, jumps to the marked line; not the frame's `self = <…>`.
    assert re.search(
        r'<a href="#failure" class="error-line" data-jump>AssertionError: Tensor-likes', html
    )


def test_the_runs_log_opens_on_its_first_regression(client, run):
    store_shard_output(run)
    page = signed_in(client).get(f"/runs/{run.uuid}/log/")
    assert page.status_code == 200
    assert MISMATCH in page.content.decode()


def test_a_test_without_a_stored_report_shows_its_stored_message(client, run):
    page = signed_in(client).get(f"/runs/{run.uuid}/log/", {"test": MISMATCH})
    html = page.content.decode()
    assert "as stored with the attempt" in html
    assert re.search(r'class="failing">.*?AssertionError: Tensor-likes are not close!', html)


def test_the_log_says_how_to_reproduce_the_test(client, run):
    html = signed_in(client).get(f"/runs/{run.uuid}/log/", {"test": MISMATCH}).content.decode()
    assert f"python reproduce --test {MISMATCH}" in html
    recorded = metadata.reproduction(run)  # as the bundle records them
    assert recorded["command"]["python"].startswith("python -m pytest")
    assert escape(recorded["command"]["python"]) in html
    assert recorded["env"]
    for name in recorded["env"]:
        assert f"export {name}=" in html


def test_each_attempt_of_the_test_has_its_log(client, run):
    html = (
        signed_in(client)
        .get(f"/runs/{run.uuid}/log/", {"test": MISMATCH, "attempt": 2})
        .content.decode()
    )
    assert "<strong>2: failed</strong>" in html
    assert f"?test={quote(MISMATCH, safe='/')}&amp;attempt=1" in html


def test_a_long_shard_output_is_paged_and_opens_at_the_tests_failure(client, run):
    store_shard_output(run, padding=1000)
    client = signed_in(client)
    page = client.get(f"/runs/{run.uuid}/log/shard-0/", {"test": MISMATCH})
    html = page.content.decode()
    numbered = re.findall(r'<tr id="L(\d+)"', html)
    assert numbered[0] == str(2 * logs.LINES_PER_PAGE + 1)  # page 3 holds line 1002
    assert len(numbered) <= logs.LINES_PER_PAGE
    assert re.search(r'<tr id="L1002" class=" target">', html)
    assert re.search(r'<tr id="L1011" class="failing">.*?AssertionError: Tensor-likes', html)
    assert 'rel="prev"' in html and 'rel="next"' not in html
    first = client.get(f"/runs/{run.uuid}/log/shard-0/", {"page": 1}).content.decode()
    assert re.findall(r'<tr id="L(\d+)"', first) == [str(n) for n in range(1, 401)]
    assert re.search(r'<a data-jump href="\?claim=1&amp;process=1&amp;page=3#L1011">', first)
    past = client.get(f"/runs/{run.uuid}/log/shard-0/", {"page": 99}).content.decode()
    assert "page 3 of 3" in past and re.findall(r'<tr id="L(\d+)"', past)[0] == "801"


def test_a_shard_output_lists_the_shards_failed_tests_with_their_logs(client, run):
    store_shard_output(run)
    html = signed_in(client).get(f"/runs/{run.uuid}/log/shard-0/").content.decode()
    assert f"/runs/{run.uuid}/log/?test={quote(MISMATCH, safe='/')}" in html


def test_credentials_in_a_stored_log_are_redacted_on_display(client, run, settings):
    trace = ADDCMUL_TRACE.replace(
        "device = ",
        "url = 'postgres://crcr:hunter2-secret@db/crcr', API_TOKEN=abcdef123456\ndevice = ",
    )
    store_shard_output(run, trace=trace)
    client = signed_in(client)
    for url in (f"/runs/{run.uuid}/log/?test={MISMATCH}", f"/runs/{run.uuid}/log/shard-0/"):
        html = client.get(url).content.decode()
        assert "[redacted]" in html
        assert "hunter2-secret" not in html and "abcdef123456" not in html


def test_a_stranger_is_sent_to_sign_in(client, run):
    for url in (f"/runs/{run.uuid}/log/", f"/runs/{run.uuid}/log/shard-0/"):
        assert client.get(url).url.startswith("/accounts/login/")


def test_an_unknown_test_or_a_bad_page_says_what_is_wrong(client, run):
    client = signed_in(client)
    unknown = client.get(f"/runs/{run.uuid}/log/", {"test": "test/test_x.py::TestX::nope"})
    assert unknown.status_code == 404
    assert (
        "No test <code>test/test_x.py::TestX::nope</code> ran in this run"
        in unknown.content.decode()
    )
    bad = client.get(f"/runs/{run.uuid}/log/shard-0/", {"page": "0"})
    assert bad.status_code == 400
    assert "page: Ensure this value is greater than or equal to 1." in bad.content.decode()
    assert client.get(f"/runs/{run.uuid}/log/shard-7/").status_code == 404


@pytest.fixture
def s3(settings, tmp_path):
    """The default storage on a real S3 server on 127.0.0.1 (moto's server mode)."""
    port = free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=(tmp_path / "s3.log").open("wb"), stderr=subprocess.STDOUT,
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    keys = {"aws_access_key_id": "testing", "aws_secret_access_key": "testing"}
    client = boto3.client("s3", endpoint_url=url, region_name="us-east-1", **keys)

    def made() -> bool:
        try:
            client.create_bucket(Bucket="logs")
        except Exception:  # not listening yet
            time.sleep(0.2)
            return False
        return True

    try:
        wait_for(made, timeout=60, what="the S3 server to answer")
        options = {"bucket_name": "logs", "endpoint_url": url, "region_name": "us-east-1",
                   "access_key": "testing", "secret_key": "testing"}  # fmt: skip
        settings.STORAGES = settings.STORAGES | {
            "default": {"BACKEND": "storages.backends.s3.S3Storage", "OPTIONS": options}
        }
        yield client
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_the_log_pages_read_the_logs_from_s3(client, run, s3):
    name = store_shard_output(run, padding=10)
    assert [o["Key"] for o in s3.list_objects_v2(Bucket="logs")["Contents"]][-1] == name
    client = signed_in(client)
    html = client.get(f"/runs/{run.uuid}/log/", {"test": MISMATCH}).content.decode()
    assert re.search(r'class="failing">.*?AssertionError: Tensor-likes are not close!', html)
    assert "pytest's report, from the stored JUnit XML" in html
    output = client.get(f"/runs/{run.uuid}/log/shard-0/").content.decode()
    assert re.search(r'<tr id="L21" class="failing">', output)


def test_a_log_with_a_huge_line_is_shown_cut_not_whole(client, run):
    huge = "x" * 3_000_000
    default_storage.save(
        f"runs/{run.uuid}/shard-0/attempt-1/p001.log",
        ContentFile(f"before\n{huge}\nafter\n".encode()),
    )
    page = signed_in(client).get(f"/runs/{run.uuid}/log/shard-0/")
    html = page.content.decode()
    assert len(page.content) < 100_000
    assert f"({3_000_000 - logs.LINE_BYTES:,} more bytes on this line)" in html
    assert re.findall(r'<tr id="L(\d+)"', html) == ["1", "2", "3"]


def test_a_tests_log_costs_the_same_queries_however_many_tests_failed(client, run):
    store_shard_output(run)
    client = signed_in(client)

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert client.get(f"/runs/{run.uuid}/log/", {"test": MISMATCH}).status_code == 200
        return len(captured)

    few = queries()
    for number in range(60):
        add_result(run, f"test/test_x.py::TestXPRIVATEUSE1::test_{number}", ["failed"] * 3,
                   "other", "regression")  # fmt: skip
    assert queries() == few


def test_a_retried_attempt_shows_the_report_of_its_own_process(client, run):
    store_shard_output(run)
    retry = ADDCMUL_TRACE.replace("0.5 at index", "0.75 at index")
    junit = (
        '<?xml version="1.0"?><testsuites><testsuite name="pytest">'
        '<testcase classname="test.test_x.TestXPRIVATEUSEONE" '
        f'name="test_addcmul_privateuseone_float64"><failure>{xml_escape(retry)}</failure>'
        "</testcase></testsuite></testsuites>"
    )
    default_storage.save(
        f"runs/{run.uuid}/shard-0/attempt-1/p002.junit.xml", ContentFile(junit.encode())
    )
    client = signed_in(client)
    first = client.get(f"/runs/{run.uuid}/log/", {"test": MISMATCH, "attempt": 1}).content.decode()
    second = client.get(f"/runs/{run.uuid}/log/", {"test": MISMATCH, "attempt": 2}).content.decode()
    assert "difference: 0.5 at index" in first and "0.75" not in first
    assert "difference: 0.75 at index" in second
    assert "claim 1 · process 2" in second
