"""JUnit XML ingestion into the database against parsing the same XML alone.

Writes a JUnit XML file of 50,000 test cases shaped like PyTorch device-type
tests (properties for op/dtype/mode, a failure in one case of twenty), then in
the same run: parses it (the baseline), and parses + ingests it into the
database named by DATABASE_URL (PostgreSQL: postgres://postgres@127.0.0.1:5432/
crcr_bench by default). Prints both (the fastest of --repeat runs each) and the ratio. Target: ratio <= 3.

    .venv/bin/python bench/ingest.py [--cases 50000]
"""

import argparse
import os
import random
import sys
import tempfile
import time
from pathlib import Path
from xml.sax.saxutils import quoteattr

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
TARGET = 3.0
OPS = ["add", "sub", "mul", "div", "addcmul", "lerp", "cumsum", "abs", "neg", "exp"]
DTYPES = ["float32", "float64", "float16", "bfloat16", "int64", "bool"]


def write_junit(path: Path, cases: int) -> None:
    rng = random.Random(0)
    with path.open("w") as out:
        out.write('<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">')
        for index in range(cases):
            op, dtype = OPS[index % len(OPS)], DTYPES[index % len(DTYPES)]
            name = f"test_{op}_{index}_privateuseone_{dtype}"
            out.write(
                f'<testcase classname="test.test_ops.TestCommonPRIVATEUSE1" name="{name}" '
                f'time="{rng.random():.3f}"><properties>'
                f'<property name="op" value="{op}"/><property name="dtype" value="{dtype}"/>'
                '<property name="mode" value="mandatory_success"/></properties>'
            )
            if index % 20 == 0:
                message = quoteattr(f"AssertionError: Tensor-likes are not close! ({index})")
                out.write(f"<failure message={message}>Mismatched elements: 3 / 64</failure>")
            out.write("</testcase>")
        out.write("</testsuite></testsuites>")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", type=int, default=50_000)
    parser.add_argument("--repeat", type=int, default=5)
    options = parser.parse_args()
    os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/crcr_bench")
    os.environ.setdefault("DEBUG", "true")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "crcr_site.settings")
    import django

    django.setup()
    from django.core.management import call_command

    from runs import ingest, report_files
    from runs.models import Backend, Run, Shard, TestResult, Trigger
    from selection.models import ConfigVersion

    call_command("migrate", verbosity=0)
    slug = f"bench-{time.time_ns()}"
    backend = Backend.objects.create(
        slug=slug,
        name=slug.title(),
        device_module="crcr_reuse.reference_device",
        repository=f"{slug}/torch-{slug}",
    )
    text = "test_suite_config:\n  files: []\n"
    config = ConfigVersion.objects.create(
        backend=backend, number=1, yaml_text=text, sha256=ConfigVersion.hash_text(text)
    )
    trigger = Trigger.objects.create(backend=backend, kind="manual", pytorch_sha="0" * 40)
    run = Run.objects.create(
        trigger=trigger, backend=backend, job_name="bench", backend_version="0",
        pytorch_sha="0" * 40, test_suite_sha="0" * 40, config_version=config,
    )  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "junit.xml"
        write_junit(path, options.cases)
        parse_times, ingest_times = [], []
        for attempt in range(options.repeat):
            started = time.perf_counter()
            count = sum(1 for _ in report_files.parse_junit(path))
            parse_times.append(time.perf_counter() - started)
            shard = Shard.objects.create(run=run, index=attempt)
            started = time.perf_counter()
            stored = ingest.ingest_junit(shard, path)
            ingest_times.append(time.perf_counter() - started)
            assert count == stored == options.cases == shard.results.count()
    TestResult.objects.filter(run=run).delete()
    # The fastest of each: on a shared machine the slower runs measure the neighbours.
    parse, store = min(parse_times), min(ingest_times)
    print(f"{options.cases:,} test cases, database {os.environ['DATABASE_URL'].split(':')[0]}")
    print(f"parse only        {parse:8.2f} s (fastest of {options.repeat})")
    print(f"parse + ingest    {store:8.2f} s")
    print(f"ratio ingest / parse = {store / parse:.2f} (target <= {TARGET})")
    return 0 if store / parse <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
