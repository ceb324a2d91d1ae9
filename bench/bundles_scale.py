"""Building the repro bundle of a 100,000-result run against `tar czf` of the same files.

In the database DATABASE_URL names (else a fresh SQLite file), builds once (a run already
there at its size is kept): a finished run of `--results` tests in `--shards` shards (one
in ten failing, each failure classified; one in fifty failed once and passed when re-run
alone), its RunRecord and a worker's environment, then VACUUM ANALYZE (the state
measured, as pages.py fixes it); and each time, in a scratch storage,
the files its pytest processes left (`results/shard-N/attempt-1/pNNN.{ids,junit.xml,
progress.jsonl,log}`: one process a shard, one more per re-run test). Then alternates,
`--rounds` times: crcr building the run's bundle exactly as the `build_bundle` task does
(`reproducibility.bundles.build`: claim, assemble, manifest, pack, store), and `tar czf`
of the folder that bundle holds (unpacked from a first build, not timed: the first
build in a process also pays what a worker loads once). Figure: median build / median
tar wall time. Target <= 2.

    .venv/bin/python bench/bundles_scale.py [--results 100000] [--shards 50] [--rounds 3]
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any
from xml.sax.saxutils import quoteattr

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
TARGET = 2.0
DEVICE = "crcr_reuse.reference_device"
FAILING = ["failed", "error", "crashed", "timed_out"]
CATEGORIES = ["unsupported_op", "numerical_mismatch", "crash", "timeout"]
MESSAGE = (
    'Traceback (most recent call last):\n  File "test/test_ops.py", line 212, in test_{n}\n'
    "    self.assertEqual(actual, expected)\nAssertionError: Tensor-likes are not close!\n"
    "Mismatched elements: 1 / 4 (25.0%)\nGreatest absolute difference: 0.{n} at index (2,)"
)


def environment(workdir: Path) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "crcr_site.settings")
    os.environ["CRCR_VAR_DIR"] = str(workdir)  # the storage: MEDIA_ROOT below it
    os.environ.setdefault("DEBUG", "true")
    os.environ["LOG_LEVEL"] = "WARNING"
    os.environ.setdefault("DATABASE_URL", f"sqlite:///{workdir / 'bench.sqlite3'}")
    for name in ("CRCR_WORK_DIR", "CRCR_STORAGE_ROOT", "TORCH_ROOT"):
        os.environ.pop(name, None)  # one host, the bundled tree: the embedded defaults


def node_id(n: int) -> str:
    return f"test/test_ops_{n % 100}.py::TestCommonPRIVATEUSE1::test_{n}_privateuseone_float32"


def outcome(n: int) -> tuple[str, str]:
    """A test's first attempt: its outcome and message."""
    if n % 10 == 0:
        return FAILING[n % 4], MESSAGE.format(n=n)
    if n % 50 == 5:
        return "failed", MESSAGE.format(n=n)  # re-run alone, it passed
    return "passed", ""


def run_data(results: int, shards: int) -> Any:
    """The finished run (kept when it has all its results), with its record."""
    from runs.models import Backend, Run, Trigger

    owner, _ = Backend.objects.get_or_create(
        slug=f"bundle-scale-{results}",
        defaults={"name": f"bundle scale {results}", "device_module": DEVICE,
                  "repository": "bench/bundle-scale"},
    )  # fmt: skip
    run = Run.objects.filter(backend=owner, status="failed").first()
    if run is not None:  # "failed" is set last: the dataset is whole
        return run
    Run.objects.filter(backend=owner).delete()
    Trigger.objects.filter(backend=owner).delete()
    return build_run(owner, results, shards)


def build_run(owner: Any, results: int, shards: int) -> Any:
    from crcr_reuse.outcomes import TestRecord
    from django.utils import timezone

    from reproducibility import capture
    from runs import ingest
    from runs.models import Run, Shard, Trigger
    from selection.models import ConfigVersion

    text = "test_suite_config:\n  files: []\n"
    config = ConfigVersion.objects.create(
        backend=owner, number=1, yaml_text=text, sha256=ConfigVersion.hash_text(text)
    )
    trigger = Trigger.objects.create(backend=owner, kind="nightly", pytorch_sha="d" * 40)
    run = Run.objects.create(
        trigger=trigger, backend=owner, job_name=owner.slug, backend_version="1",
        pytorch_sha="d" * 40, test_suite_sha="d" * 40, config_version=config, status="running",
    )  # fmt: skip
    for index in range(shards):
        numbers = range(index, results, shards)
        shard = Shard.objects.create(
            run=run, index=index, test_ids=[node_id(n) for n in numbers], status="done",
            attempts=1, worker="bench-host", estimated_seconds=len(numbers) * 0.05,
        )  # fmt: skip
        records = []
        for n in numbers:
            first, message = outcome(n)
            records.append(TestRecord(node_id(n), first, 0.05, message,
                                      properties=[["op", "add"], ["dtype", "float32"]]))  # fmt: skip
            if n % 50 == 5:
                records.append(TestRecord(node_id(n), "passed", 0.05, attempt=2))
        ingest.save(shard, records)
    classify(run)
    capture.record_run_start(run)
    capture.record_worker(run, run.shards.get(index=0))
    # As `runs.results.finish_if_done` ends a run: its counts stored, its status last.
    run.summarise()
    run.status, run.finished_at = "failed", timezone.now()
    run.save(update_fields=["test_summary", "failure_summary", "status", "finished_at"])
    return run


def classify(run: Any) -> None:
    """Each failing first attempt classified, as a finished run's failures are."""
    from runs.models import Failure

    failing = run.results.filter(outcome__in=FAILING, attempt=1).values_list("pk", flat=True)
    Failure.objects.bulk_create(
        (
            Failure(result_id=pk, run=run, category=CATEGORIES[n % 4], verdict="regression",
                    verdict_reason="passed in the job's last green run",
                    decisive_line="AssertionError: Tensor-likes are not close!")
            for n, pk in enumerate(failing.iterator(chunk_size=5000))
        ),
        batch_size=5000,
    )  # fmt: skip


def write_files(run: Any, results: int, shards: int) -> int:
    """The files each shard's pytest processes left in storage; how many files."""
    from runs import planning

    written = 0
    for index in range(shards):
        folder = planning.workdir_for(run) / f"shard-{index}" / "attempt-1"
        folder.mkdir(parents=True, exist_ok=True)
        numbers = list(range(index, results, shards))
        processes = [numbers] + [[n] for n in numbers if n % 50 == 5]  # the re-runs
        for number, tests in enumerate(processes, 1):
            process_files(folder / f"p{number:03d}", tests, retry=number > 1)
            written += 4
    return written


def process_files(stem: Path, numbers: list[int], retry: bool) -> None:
    """One pytest process's ids, progress log, JUnit XML and output."""
    ids, progress, cases, dots, failures = [], [], [], [], []
    for n in numbers:
        result, message = ("passed", "") if retry else outcome(n)
        ids.append(node_id(n) + "\n")
        progress.append(json.dumps({"node_id": node_id(n), "event": "start"}) + "\n")
        progress.append(json.dumps({
            "node_id": node_id(n), "event": "finish", "outcome": result, "duration": 0.05,
            "message": message, "markers": [], "properties": [["op", "add"], ["dtype", "float32"]],
        }) + "\n")  # fmt: skip
        classname, _, name = node_id(n).replace("/", ".").replace(".py::", ".").rpartition("::")
        failure = (
            f"<failure message={quoteattr(message[-200:])}>{message}</failure>" if message else ""
        )
        cases.append(f'<testcase classname="{classname}" name="{name}" time="0.050">'
                     f'<properties><property name="op" value="add"/><property name="dtype" '
                     f'value="float32"/></properties>{failure}</testcase>\n')  # fmt: skip
        dots.append("F" if message else ".")
        failures += [f"___ {name} ___\n{message}\n"] if message else []
    stem.with_suffix(".ids").write_text("".join(ids))
    stem.with_suffix(".progress.jsonl").write_text("".join(progress))
    junit = '<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">\n'
    stem.with_suffix(".junit.xml").write_text(
        junit + "".join(cases) + "</testsuite></testsuites>\n"
    )
    lines = ["".join(dots[i : i + 80]) + "\n" for i in range(0, len(dots), 80)]
    stem.with_suffix(".log").write_text("".join(lines) + "".join(failures))


def settle() -> None:
    """The state measured, as `pages.py` fixes it: a run just bulk-loaded leaves tables
    autovacuum would work through during the rounds (in `run_all.py --fresh`, right after
    the other benches' loads: 2.5-2.6 against 1.6-1.7 alone), so vacuum and analyze first."""
    from django.db import connection

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("VACUUM ANALYZE")


def time_build(run: Any, unpacked: Path) -> tuple[float, int]:
    """Wall seconds of building a bundle of the run as the task does, and its size; the
    first one built is unpacked into `unpacked` for tar."""
    from reproducibility import bundles
    from reproducibility.models import Bundle

    made = Bundle.objects.create(run=run)
    started = time.perf_counter()
    bundle = bundles.build(made.pk)
    elapsed = time.perf_counter() - started
    if bundle is None or bundle.status != Bundle.Status.READY:
        raise SystemExit(f"the bundle was not built: {bundle and bundle.error}")
    if not unpacked.exists():
        with tarfile.open(Path(bundle.file.path)) as archive:
            archive.extractall(unpacked, filter="data")
    bundle.file.delete(save=False)  # the storage keeps no bundle of the bench
    bundle.delete()
    return elapsed, bundle.size


def time_tar(folder: Path, archive: Path) -> tuple[float, int]:
    started = time.perf_counter()
    subprocess.run(["tar", "czf", str(archive), "-C", str(folder.parent), folder.name], check=True)
    return time.perf_counter() - started, archive.stat().st_size


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", type=int, default=100_000)
    parser.add_argument("--shards", type=int, default=50)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="crcr-bench-") as tmp:
        scratch = Path(tmp)
        environment(scratch)
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", "--no-input", verbosity=0)
        started = time.monotonic()
        run = run_data(args.results, args.shards)
        files = write_files(run, args.results, args.shards)
        settle()
        built = time.monotonic() - started
        samples: dict[str, list[tuple[float, int]]] = {"build": [], "tar": []}
        unpacked = scratch / "unpacked"
        # Not timed: the first build in a process loads what a worker loads once (imports,
        # the URL resolver: 0.3-0.4 s), and it unpacks the folder tar archives.
        time_build(run, unpacked)
        for index in range(args.rounds):
            # The first round builds first (tar needs the folder a bundle holds); then
            # each round swaps the order, so drift in the machine's load falls on both.
            for side in ("build", "tar") if index % 2 == 0 else ("tar", "build"):
                if side == "build":
                    samples["build"].append(time_build(run, unpacked))
                else:
                    folder = next(unpacked.iterdir())
                    samples["tar"].append(time_tar(folder, scratch / "tar.tar.gz"))
        content = sum(p.stat().st_size for p in unpacked.rglob("*") if p.is_file())
    return report(args, files, built, content, samples)


def report(
    args: Any, files: int, built: float, content: int, samples: dict[str, list[tuple[float, int]]]
) -> int:
    database = os.environ["DATABASE_URL"].split(":")[0]
    print(f"a run of {args.results:,} results in {args.shards} shards, {files:,} result files, "
          f"data ready in {built:.0f} s, database {database}")  # fmt: skip
    print(f"bundle content {content / 1e6:.1f} MB")
    times = {name: [seconds for seconds, _ in rounds] for name, rounds in samples.items()}
    for name, rounds in samples.items():
        shown = ", ".join(f"{seconds:.2f}" for seconds, _ in rounds)
        print(f"{name:>6}: median {statistics.median(times[name]):.2f} s (rounds {shown}), "
              f"archive {rounds[-1][1] / 1e6:.1f} MB")  # fmt: skip
    ratio = statistics.median(times["build"]) / statistics.median(times["tar"])
    print(f"bundle build / tar czf: {ratio:.2f} (target <= {TARGET})")
    return 0 if ratio <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
