"""Each job's trend of tests passing: an SVG with one point per finished run, oldest left."""

import re
import xml.etree.ElementTree as ET
from datetime import timedelta

import pytest
from django.utils import timezone

from runs import charts
from runs.models import Failure, Run, Shard, TestResult, Trigger
from tests.factories import make_backend, make_config, make_user

SVG = "{http://www.w3.org/2000/svg}"
START = timezone.now() - timedelta(days=1)


def plant(backend, number, job, outcomes, status="passed", changed=()) -> Run:
    """A run whose tests had these attempts: "pf" failed then passed on the retry."""
    sha = short(number) + "a" * 28
    trigger = Trigger.objects.create(backend=backend, kind="nightly", pytorch_sha=sha)
    at = START + timedelta(minutes=number)
    run = Run.objects.create(
        trigger=trigger, backend=backend, job_name=job, backend_version="1", pytorch_sha=sha,
        test_suite_sha=sha, config_version=backend.config_versions.first(), status=status,
        created_at=at, started_at=at, finished_at=at if status != "running" else None,
        changed_since_green=list(changed),
    )  # fmt: skip
    shard = Shard.objects.create(run=run, index=0)
    names = {"p": "passed", "f": "failed", "s": "skipped", "x": "xfailed"}
    for index, attempts in enumerate(outcomes):
        for attempt, letter in enumerate(attempts, start=1):
            result = TestResult.objects.create(
                shard=shard, run=run, attempt=attempt, node_id=f"test/t.py::T::test_{index}",
                file_path="test/t.py", test_name=f"test_{index}", outcome=names[letter],
            )  # fmt: skip
            if letter == "f" and attempt == len(attempts):
                Failure.objects.create(
                    result=result, run=run, category="other", verdict="regression",
                    decisive_line=f"test_{index} broke",
                )  # fmt: skip
    return run


def short(number: int) -> str:
    """The first 12 characters of run `number`'s PyTorch SHA, as the tooltips show it."""
    return f"{number:02x}" + "a" * 10


def trends_in(html: str) -> dict[str, list[str]]:
    """Each trend chart on a page: its job -> the tooltips of its points, left to right."""
    found = {}
    for svg in re.findall(r'<svg class="chart trend".*?</svg>', html, re.S):
        root = ET.fromstring(svg)
        job = root.find(f"{SVG}text").text
        found[job] = [c.find(f"{SVG}title").text for c in root.iter(f"{SVG}circle")]
    return found


@pytest.mark.django_db
def test_the_hud_draws_one_point_per_finished_run_with_its_pass_rate(client):
    backend = make_backend("acme")
    make_config(backend)
    plant(backend, 1, "acme", ["p", "p", "f", "f"], status="failed")  # 2 of 4
    plant(backend, 2, "acme", ["p", "fp", "p", "s"])  # a retry that passed counts; skipped not
    plant(backend, 3, "acme", ["p", "fff", "fff", "x"], status="failed")  # xfailed passes
    plant(backend, 4, "acme", ["p"], status="running")  # not finished: no point
    plant(backend, 5, "acme (backend 0.9)", ["p", "p", "p", "p"])
    client.force_login(make_user("vera"))
    trends = trends_in(client.get("/").content.decode())
    assert trends["acme"] == [
        f"nightly {short(1)}: 50% of tests passing (2 of 4)",
        f"nightly {short(2)}: 100% of tests passing (3 of 3)",
        f"nightly {short(3)}: 50% of tests passing (2 of 4)",
    ]
    assert trends["acme (backend 0.9)"] == [f"nightly {short(5)}: 100% of tests passing (4 of 4)"]


@pytest.mark.django_db
def test_the_run_page_shows_its_jobs_trend_with_the_run_ringed(client):
    backend = make_backend("acme")
    make_config(backend)
    runs = [plant(backend, n, "acme", ["p", "f"] if n == 2 else ["p"]) for n in (1, 2, 3)]
    client.force_login(make_user("vera"))
    html = client.get(f"/runs/{runs[1].uuid}/").content.decode()
    assert len(trends_in(html)["acme"]) == 3
    root = ET.fromstring(re.search(r'<svg class="chart trend".*?</svg>', html, re.S).group())
    ringed = [c for c in root.iter(f"{SVG}circle") if c.get("stroke")]
    assert [c.find(f"{SVG}title").text for c in ringed] == [
        f"nightly {short(2)}: 50% of tests passing (1 of 2)"
    ]


def test_points_rise_with_the_pass_rate_and_their_labels_are_escaped():
    points = [
        charts.Point("<b>first</b>", 1, 4),
        charts.Point("second", 4, 4),
        charts.Point("third", 0, 4),
    ]
    svg = str(charts.pass_rate_trend("job <script>alert(1)</script>", points))
    assert "<script>" not in svg and "<b>" not in svg
    root = ET.fromstring(svg)
    assert "job <script>alert(1)</script>" in root.find(f"{SVG}title").text  # as text
    circles = list(root.iter(f"{SVG}circle"))
    heights = [float(c.get("cy")) for c in circles]
    xs = [float(c.get("cx")) for c in circles]
    assert heights[1] < heights[0] < heights[2]  # SVG y grows downwards
    assert xs == sorted(xs)
    assert circles[0].find(f"{SVG}title").text == "<b>first</b>: 25% of tests passing (1 of 4)"


def test_a_job_without_finished_runs_has_no_chart():
    assert charts.pass_rate_trend("acme", []) == ""


@pytest.mark.django_db
def test_the_hud_lists_the_jobs_red_now_with_their_regressions_and_attribution(client):
    backend = make_backend("acme")
    make_config(backend)
    plant(backend, 1, "acme", ["p", "p"])
    plant(backend, 2, "acme", ["p", "fff"], status="failed", changed=["backend"])
    plant(backend, 3, "acme (backend 0.9)", ["fff"], status="failed", changed=["backend"])
    plant(backend, 4, "acme (backend 0.9)", ["p"])  # green again: not red now
    client.force_login(make_user("vera"))
    html = client.get("/").content.decode()
    red = html[html.index("<h2>Red now</h2>") : html.index("<h2>Tests passing per job</h2>")]
    assert "only the backend changed since the last green run" in red
    assert "test/t.py::T::test_1" in red and "test_1 broke" in red
    assert "acme (backend 0.9)" not in red
