"""Server time of a filtered review-queue page with 20,000 proposals, against a trivial page.

Migrates the database named by DATABASE_URL (else a fresh SQLite file), fills one
backend with 20,000 proposals (bulk_create) and, on PostgreSQL, VACUUM ANALYZEs the
whole database (the state measured: planner statistics for every table, in a fresh
database as in one other benches filled), then times, in this process through
Django's full request stack (middleware, session, view, template), interleaved:
a reviewer's GET of the queue filtered by file, status and operator, newest
first, page 2; the same reviewer's GET of a trivial page (the site's layout,
`base.html`, with nothing in it: the same session, user and template work every
page pays); and GET /api/whoami/ (token check and one query, no session, no
template). Prints p50/p99 of each. Target: queue p50 / trivial page p50 <= 5;
the ratio against the API call is printed for reference.

    .venv/bin/python bench/pages.py [--proposals 20000] [--count 200]
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
TARGET = 5.0
FILTERED = "/review/?backend=bench-pages&file=test/test_file_3.py&status=pending&op=lgamma&sort=newest&page=2"
TRIVIAL = "/bench/trivial/"
API = "/api/whoami/"


def trivial_page(request: Any) -> Any:
    """The site's layout for a signed-in user, with nothing in it."""
    from django.shortcuts import render

    return render(request, "base.html", {})


def urlconf() -> Any:
    """The project's URLs plus the trivial page, as a URLconf module."""
    from types import ModuleType

    from django.contrib.auth.decorators import login_required
    from django.urls import include, path

    module = ModuleType("bench_urls")
    module.urlpatterns = [  # type: ignore[attr-defined]
        path("bench/trivial/", login_required(trivial_page)),
        path("", include("crcr_site.urls")),
    ]
    return module


def environment(workdir: Path) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "crcr_site.settings")
    os.environ["CRCR_VAR_DIR"] = str(workdir)
    os.environ.setdefault("DEBUG", "true")
    os.environ["LOG_LEVEL"] = "WARNING"
    os.environ.setdefault("DATABASE_URL", f"sqlite:///{workdir / 'bench.sqlite3'}")


def proposals(backend: Any, count: int) -> None:
    """`count` pending skip proposals of `backend` over 20 files and 7 classes (a fifth
    approved), replacing its queue."""
    from selection.models import Proposal

    Proposal.objects.filter(backend=backend).delete()
    files = [f"test/test_file_{n}.py" for n in range(20)]
    Proposal.objects.bulk_create(
        (
            Proposal(
                backend=backend, file_path=files[n % 20], class_name=f"TestClass{n % 7}",
                test_name=f"test_{n}", mode=Proposal.Mode.SKIP,
                reason=f"needs an operator the device lacks ({n})",
                evidence={"unsupported_ops": ["lgamma.default" if n % 3 else "add.Tensor"],
                          "waiting_on": ["lgamma" if n % 3 else "add"], "ops_under_test": 3},
                stage=Proposal.Stage.CLASSIFY,
                status=Proposal.Status.APPROVED if n % 5 == 0 else Proposal.Status.PENDING,
            )
            for n in range(count)
        ),
        batch_size=5000,
    )  # fmt: skip


def fill(count: int) -> tuple[Any, str]:
    """A reviewer and a token; the bench backend's queue replaced by `count` proposals."""
    from django.contrib.auth import get_user_model
    from django.contrib.auth.models import Group
    from django.db import connection

    from runs.models import ApiToken, Backend

    backend, _ = Backend.objects.get_or_create(
        slug="bench-pages",
        defaults={"name": "bench", "device_module": "crcr_reuse.reference_device",
                  "repository": "bench/bench"},
    )  # fmt: skip
    proposals(backend, count)
    user, _ = get_user_model().objects.get_or_create(username="bench-reviewer")
    user.groups.add(Group.objects.get_or_create(name="reviewer")[0])
    token = ApiToken.issue(user, name="bench", backends=[backend])[1]
    if connection.vendor == "postgresql":
        # The state measured, fresh database or not: no dead rows of earlier runs, and
        # planner statistics for every table the page reads (in a fresh database the
        # backends, users and sessions were never analyzed, and autovacuum does not
        # analyze a table until 50 of its rows changed).
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE")
    return user, token


def timed(client: object, path: str, **headers: str) -> float:
    started = time.perf_counter()
    response = client.get(path, **headers)  # type: ignore[attr-defined]
    elapsed = time.perf_counter() - started
    if response.status_code != 200:
        raise SystemExit(f"GET {path} answered {response.status_code}")
    return elapsed


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--proposals", type=int, default=20_000)
    parser.add_argument("--count", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="crcr-bench-") as tmp:
        environment(Path(tmp))
        import django

        django.setup()
        from django.conf import settings
        from django.core.management import call_command
        from django.test import Client

        call_command("migrate", "--no-input", verbosity=0)
        user, token = fill(args.proposals)
        settings.ROOT_URLCONF = urlconf()
        client = Client()
        client.force_login(user)
        queue, trivial, api = [], [], []
        for index in range(args.count + 20):
            page = timed(client, FILTERED)
            base = timed(client, TRIVIAL)
            call = timed(client, API, HTTP_AUTHORIZATION=f"Token {token}")
            if index >= 20:  # the first 20 of each warm caches and connections up
                queue.append(page)
                trivial.append(base)
                api.append(call)
    ratio = statistics.median(queue) / statistics.median(trivial)
    database = os.environ["DATABASE_URL"].split(":")[0]
    print(f"{args.proposals:,} proposals, {args.count} requests each, database {database}")
    print(f"{'page':<36}{'p50 ms':>10}{'p99 ms':>10}")
    for name, samples in (("GET " + FILTERED.split("?")[0] + " (filtered)", queue),
                          ("GET " + TRIVIAL + " (layout only)", trivial),
                          ("GET " + API + " (API, no session)", api)):  # fmt: skip
        print(
            f"{name:<36}{percentile(samples, 0.5) * 1e3:>10.2f}{percentile(samples, 0.99) * 1e3:>10.2f}"
        )
    print(f"queue p50 / API call p50: {statistics.median(queue) / statistics.median(api):.2f}")
    print(f"queue p50 / trivial page p50 = {ratio:.2f} (target <= {TARGET})")
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
