"""The benchmark scripts still run and print a figure `bench/run_all.py` reads.

Tiny sizes, a fresh SQLite file each: what is checked is that a change elsewhere has not
broken a bench (the hashed API tokens once did, unnoticed), never how fast anything is.
"""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run_all_module():
    spec = importlib.util.spec_from_file_location("bench_run_all", ROOT / "bench" / "run_all.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SCALE = ["--proposals", "60", "--commits", "4", "--jobs", "3", "--results", "300",
         "--entries", "30", "--count", "2"]  # fmt: skip


@pytest.mark.parametrize(
    ("script", "arguments", "labels"),
    [
        ("pages", ["--proposals", "60", "--count", "3"], ["queue p50 / trivial page p50"]),
        ("intake", ["--count", "3"], ["intake p50 / trivial p50"]),
        ("pages_at_scale", SCALE, [
            "review queue, 60 proposals p50 / trivial page p50",
            "HUD, 4 commits x 3 jobs p50 / trivial page p50",
            "run page, 300 results p50 / trivial page p50",
            "config page, 30 entries p50 / trivial page p50",
        ]),
    ],
)  # fmt: skip
def test_a_bench_runs_on_a_fresh_database_and_prints_its_figure(script, arguments, labels):
    env = {key: value for key, value in os.environ.items() if key != "DATABASE_URL"}
    env["CELERY_BROKER_URL"] = "redis://127.0.0.1:6379/12"  # nothing consumes it: gates queue
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / f"{script}.py"), *arguments],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode in (0, 1), done.stdout + done.stderr  # 1: a target missed at this size
    found = run_all_module().figures(script, done.stdout)
    assert [figure.label for figure in found] == labels
    assert all(figure.value > 0 for figure in found)
