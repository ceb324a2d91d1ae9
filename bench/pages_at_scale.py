"""Server time of six pages at ten times today's data, each against a trivial page.

In the database DATABASE_URL names (else a fresh SQLite file), builds in bulk, once (a
dataset already there at its size is kept): the review queue of a backend with 200,000
proposals; a HUD of 1,000 upstream commits x 20 jobs (20,000 runs); a run of 100,000
results in 50 shards (one in ten failing, each failure classified, one in fifty retried);
a backend whose config has 10,000 entries (v2, its parent v1 with 9,990). Then times,
as bench/pages.py does (in-process, Django's whole request stack, interleaved with the
trivial page: the site's layout for the same signed-in user): page 2 of the queue
filtered by file, status and operator, newest first; the HUD's first page; the summary's
nightly tab and the metrics page over 90 days, on the HUD's runs; the run's page; the
backend's config page. Prints each page's p50, p99 and SQL queries, and its
p50 / trivial page p50 with its target (<= 5). The query counts do not grow with the
data: tests/crcr_site/test_pages_at_scale.py and tests/runs/test_hud.py hold that.

    .venv/bin/python bench/pages_at_scale.py [--proposals 200000] [--commits 1000]
        [--jobs 20] [--results 100000] [--entries 10000] [--count 100]
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import pages  # noqa: E402  (the trivial page, the URLconf and the environment)

TARGET = 5.0
FAILING = ["failed", "error", "crashed", "timed_out"]
CATEGORIES = ["unsupported_op", "numerical_mismatch", "crash", "timeout"]
# What a finished run of the HUD stores (`Run.test_summary`, and `Run.failure_summary`: no
# failure): the HUD reads it, whatever the number of results behind it.
SUMMARY = {"passed": 95_000, "failed": 1_000, "skipped": 4_000}


def backend(slug: str) -> Any:
    from runs.models import Backend

    return Backend.objects.get_or_create(
        slug=slug, defaults={"name": slug, "device_module": "crcr_reuse.reference_device",
                             "repository": f"bench/{slug}"},
    )[0]  # fmt: skip


def config(owner: Any, text: str = "test_suite_config:\n  files: []\n", parent: Any = None) -> Any:
    from selection.models import ConfigVersion

    number = ConfigVersion.objects.filter(backend=owner).count() + 1
    return ConfigVersion.objects.create(
        backend=owner, number=number, yaml_text=text, sha256=ConfigVersion.hash_text(text),
        parent=parent,
    )  # fmt: skip


def queue_data(count: int) -> str:
    """The queue's proposals (kept when there are `count`); the filtered page's URL."""
    from selection.models import Proposal

    owner = backend(f"scale-queue-{count}")
    if Proposal.objects.filter(backend=owner).count() != count:
        pages.proposals(owner, count)
    return pages.FILTERED.replace("bench-pages", owner.slug)


def hud_data(commits: int, jobs: int) -> str:
    """`commits` nightly commits x `jobs` jobs, one run each (kept when all are there)."""
    from django.utils import timezone

    from runs.models import Run, Trigger

    owner = backend(f"scale-hud-{commits}x{jobs}")
    runs = Run.objects.filter(backend=owner)
    if runs.count() != commits * jobs or runs.filter(finished_at__isnull=True).exists():
        Run.objects.filter(backend=owner).delete()
        Trigger.objects.filter(backend=owner).delete()
        version = config(owner)
        start = timezone.now() - timedelta(minutes=commits + 10)
        triggers = Trigger.objects.bulk_create(
            Trigger(backend=owner, kind="nightly", pytorch_sha=f"{n:08x}" + "c" * 32)
            for n in range(commits)
        )
        Run.objects.bulk_create(
            (
                Run(trigger=trigger, backend=owner, job_name=f"{owner.slug} (config {job})",
                    backend_version="1", pytorch_sha=trigger.pytorch_sha,
                    test_suite_sha=trigger.pytorch_sha, config_version=version,
                    status="failed" if (n + job) % 7 == 0 else "passed",
                    created_at=start + timedelta(minutes=n, seconds=job),
                    started_at=start + timedelta(minutes=n, seconds=job + 20),
                    finished_at=start + timedelta(minutes=n + 30, seconds=job),
                    changed_since_green=["PyTorch"], test_summary=SUMMARY, failure_summary=[])
                for n, trigger in enumerate(triggers)
                for job in range(jobs)
            ),
            batch_size=5000,
        )  # fmt: skip
    # A dataset built before runs stored their failures' counts: as `finish_if_done` stores
    # them (these runs have no failure).
    Run.objects.filter(backend=owner, failure_summary__isnull=True).update(failure_summary=[])
    return "/"


def run_data(results: int, shards: int = 50) -> str:
    """A finished run of `results` tests (kept when it has them all); its page's URL."""
    from runs.models import Failure, Run, Shard, TestResult, Trigger

    owner = backend(f"scale-run-{results}")
    run = Run.objects.filter(backend=owner).first()
    if run and run.status == "failed":  # set last: the dataset is whole
        return summarised(run)
    Run.objects.filter(backend=owner).delete()
    Trigger.objects.filter(backend=owner).delete()
    trigger = Trigger.objects.create(backend=owner, kind="nightly", pytorch_sha="d" * 40)
    run = Run.objects.create(
        trigger=trigger, backend=owner, job_name=owner.slug, backend_version="1",
        pytorch_sha="d" * 40, test_suite_sha="d" * 40, config_version=config(owner),
        status="running",
    )  # fmt: skip
    ids = [
        f"test/test_ops_{n % 100}.py::TestCommonPrivateUse1::test_{n}_float32"
        for n in range(results)
    ]
    made = Shard.objects.bulk_create(
        Shard(run=run, index=n, test_ids=ids[n::shards], status="done") for n in range(shards)
    )
    rows = []
    for n, node in enumerate(ids):
        failing, retried = n % 10 == 0, n % 50 == 5
        rows.append(TestResult(
            shard=made[n % shards], run=run, node_id=node, file_path=f"test/test_ops_{n % 100}.py",
            class_name="TestCommonPrivateUse1", test_name=f"test_{n}", op="add", dtype="float32",
            outcome=FAILING[n % 4] if failing else "failed" if retried else "passed",
            message="AssertionError: Tensor-likes are not close!\nMismatched elements: 1 / 4"
            if failing or retried else "", duration=0.01,
        ))  # fmt: skip
        if retried:
            rows.append(TestResult(shard=made[n % shards], run=run, node_id=node, attempt=2,
                                   file_path=rows[-1].file_path, test_name=f"test_{n}",
                                   outcome="passed"))  # fmt: skip
    stored = TestResult.objects.bulk_create(rows, batch_size=5000)
    Failure.objects.bulk_create(
        (
            Failure(result=result, run=run, category=CATEGORIES[n % 4], verdict="regression",
                    verdict_reason="passed in the job's last green run")
            for n, result in enumerate(r for r in stored if r.outcome in FAILING and r.message)
        ),
        batch_size=5000,
    )  # fmt: skip
    Run.objects.filter(pk=run.pk).update(status="failed")
    return summarised(run)


def summarised(run: Any) -> str:
    """The run's counts and end stored as `runs.results.finish_if_done` stores them; its
    page's URL."""
    if run.test_summary is None or run.failure_summary is None or run.finished_at is None:
        from django.utils import timezone

        run.summarise()
        run.finished_at = run.finished_at or timezone.now()
        run.save(update_fields=["test_summary", "failure_summary", "finished_at"])
    return f"/runs/{run.uuid}/"


def config_data(entries: int) -> str:
    """A backend whose latest config (v2) has `entries` entries, its parent v1 ten fewer."""
    from selection import configwriter
    from selection.models import ConfigVersion

    owner = backend(f"scale-config-{entries}")
    if ConfigVersion.objects.filter(backend=owner).count() != 2:
        ConfigVersion.objects.filter(backend=owner).delete()

        def text(count: int) -> str:
            return configwriter.standalone("", [
                configwriter.Decision(f"test/test_ops_{n % 100}.py", "TestCommonPrivateUse1",
                                      f"test_{n}", "xfail" if n % 3 else "mandatory_success",
                                      f"tolerance differs on the device ({n})")
                for n in range(count)
            ])  # fmt: skip

        config(owner, text(entries), parent=config(owner, text(max(0, entries - 10))))
    return f"/configs/{owner.slug}/"


def analyse() -> None:
    from django.db import connection

    if connection.vendor == "postgresql":
        # The steady state autovacuum keeps: fresh statistics and visibility maps.
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE")


def query_count(client: Any, path: str) -> int:
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    with CaptureQueriesContext(connection) as captured:
        client.get(path)
    return len(captured)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--proposals", type=int, default=200_000)
    parser.add_argument("--commits", type=int, default=1_000)
    parser.add_argument("--jobs", type=int, default=20)
    parser.add_argument("--results", type=int, default=100_000)
    parser.add_argument("--entries", type=int, default=10_000)
    parser.add_argument("--count", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="crcr-bench-") as tmp:
        pages.environment(Path(tmp))
        import django

        django.setup()
        from django.conf import settings
        from django.contrib.auth import get_user_model
        from django.contrib.auth.models import Group
        from django.core.cache import cache
        from django.core.management import call_command
        from django.test import Client

        call_command("migrate", "--no-input", verbosity=0)
        started = time.monotonic()
        urls = {
            f"review queue, {args.proposals:,} proposals": queue_data(args.proposals),
            f"HUD, {args.commits:,} commits x {args.jobs} jobs": hud_data(args.commits, args.jobs),
            # The HUD's runs again (nightly ones): every one of them counted.
            f"summary, nightly tab, {args.commits * args.jobs:,} runs": "/summary/?event=nightly&days=90",
            f"metrics, 90 days, {args.commits * args.jobs:,} runs": "/metrics/?days=90",
            f"run page, {args.results:,} results": run_data(args.results),
            f"config page, {args.entries:,} entries": config_data(args.entries),
        }
        analyse()
        built = time.monotonic() - started
        user, _ = get_user_model().objects.get_or_create(username="bench-reviewer")
        user.groups.add(Group.objects.get_or_create(name="reviewer")[0])
        settings.ROOT_URLCONF = pages.urlconf()
        client = Client()
        client.force_login(user)
        counts = {name: query_count(client, url) for name, url in urls.items()}
        samples: dict[str, list[float]] = {name: [] for name in [*urls, "trivial"]}
        for index in range(args.count + 10):
            for name, url in [*urls.items(), ("trivial", pages.TRIVIAL)]:
                elapsed = pages.timed(client, url)
                if index >= 10:  # the first 10 of each warm caches and connections up
                    samples[name].append(elapsed)
        cold = []
        hud = next(name for name in urls if name.startswith("HUD"))
        for _ in range(max(5, args.count // 5)):
            cache.clear()
            cold.append(pages.timed(client, urls[hud]))
    database = os.environ["DATABASE_URL"].split(":")[0]
    print(f"data ready in {built:.0f} s, {args.count} requests each, database {database}")
    print(f"{'page':<40}{'p50 ms':>10}{'p99 ms':>10}{'queries':>9}")
    for name, times in samples.items():
        p50, p99 = pages.percentile(times, 0.5) * 1e3, pages.percentile(times, 0.99) * 1e3
        print(f"{name:<40}{p50:>10.2f}{p99:>10.2f}{counts.get(name, ''):>9}")
    trivial = statistics.median(samples["trivial"])
    first = statistics.median(cold)
    print(
        f"(HUD first view, cache emptied: p50 {first * 1e3:.2f} ms, {first / trivial:.2f}x trivial)"
    )
    ratios = {name: statistics.median(samples[name]) / trivial for name in urls}
    for name, ratio in ratios.items():
        print(f"{name} p50 / trivial page p50 = {ratio:.2f} (target <= {TARGET})")
    return 0 if all(ratio <= TARGET for ratio in ratios.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
