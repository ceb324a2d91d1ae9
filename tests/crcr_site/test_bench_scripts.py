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
# Two tests of the bundled tree with no device variants: one pytest process a side.
SHARD_IDS = (
    "test/test_plain_reuse.py::TestPlainMath::test_sum\n"
    "test/test_plain_reuse.py::TestPlainStrings::test_sum\n"
)


@pytest.mark.parametrize(
    ("script", "arguments", "labels"),
    [
        ("pages", ["--proposals", "60", "--count", "3"], ["queue p50 / trivial page p50"]),
        ("intake", ["--count", "3"], ["intake p50 / trivial p50"]),
        ("shard_cost", ["--copies", "1", "--rounds", "1", "--ids", "{ids}"],
         ["shard wall time crcr / plain pytest"]),
        ("bundles_scale", ["--results", "300", "--shards", "3", "--rounds", "1"],
         ["bundle build / tar czf"]),
        ("pages_at_scale", SCALE, [
            "review queue, 60 proposals p50 / trivial page p50",
            "HUD, 4 commits x 3 jobs p50 / trivial page p50",
            "summary, nightly tab, 12 runs p50 / trivial page p50",
            "metrics, 90 days, 12 runs p50 / trivial page p50",
            "run page, 300 results p50 / trivial page p50",
            "config page, 30 entries p50 / trivial page p50",
        ]),
    ],
)  # fmt: skip
def test_a_bench_runs_on_a_fresh_database_and_prints_its_figure(
    script, arguments, labels, tmp_path
):
    (tmp_path / "ids.txt").write_text(SHARD_IDS)
    arguments = [argument.replace("{ids}", str(tmp_path / "ids.txt")) for argument in arguments]
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


def test_the_big_tree_benches_run_at_a_tiny_size_and_print_their_figures(tmp_path):
    """bigtree builds (and caches) a tree of 3 files; selection_scale and first_test then
    take it from the cache and run side by side (each starts several torch processes)."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL")}
    env["CRCR_BENCH_CACHE"] = str(tmp_path / "cache")
    size = ["--files", "3", "--per-file", "10"]

    def start(script: str) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, str(ROOT / "bench" / f"{script}.py"), *size],
            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip

    labels = {
        "bigtree": ["generated variants"],
        "selection_scale": ["stages 1-3 / plain collection, CPU per test",
                            "peak RSS of the pipeline's processes, MiB"],
        "first_test": ["first test / plain collection, CPU"],
    }  # fmt: skip
    first = start("bigtree")
    done = {"bigtree": (first.communicate(timeout=300)[0], first.returncode)}
    assert "built in" in done["bigtree"][0], done["bigtree"][0]
    pair = {script: start(script) for script in ("selection_scale", "first_test")}
    for script, process in pair.items():
        done[script] = (process.communicate(timeout=600)[0], process.returncode)
        assert "from the cache" in done[script][0], done[script][0]
    for script, (output, status) in done.items():
        assert status in (0, 1), output  # 1: a target missed at this size
        found = run_all_module().figures(script, output)
        assert [figure.label for figure in found] == labels[script], output
        assert all(figure.value > 0 for figure in found)


# Three Spyre-style configs (after Spyre's own: a model-op item, an upstream file listing a
# test twice with two modes; one with a mode neither knows) and a YAML file that is no config.
SPYRE_OPS = """\
test_suite_config:
  labels: [trunk, core]
  files:
    - path: ${TORCH_DEVICE_ROOT}/tests/models/test_model_ops_v2.py
      tests:
        - names: [TestSpyreModelOps::test_model_ops_db]
          edits:
            ops:
              include:
                - name: torch.add
                  sample_inputs_func: {args: [{value: 1}]}
                  description: 'modeling.py#L1 in forward, code: x + 1'
  global:
    supported_dtypes: [{name: float16, description: native}]
    input_config: {seed: 1}
"""
SPYRE_TWICE = """\
test_suite_config:
  files:
    - path: ${TORCH_ROOT}/test/test_twice.py
      unlisted_test_mode: skip
      tests:
        - names: [TestTwice::test_one]
          mode: xfail
        - names: [TestTwice::test_one, TestTwice::test_two]
          mode: skip
"""
SPYRE_BAD = SPYRE_TWICE.replace("mode: xfail", "mode: sometimes")


def test_spyre_configs_reports_what_imports_validates_and_keeps_its_descriptions(tmp_path):
    tree = tmp_path / "tests" / "configs"
    (tree / "models").mkdir(parents=True)
    (tree / "models" / "ops.yaml").write_text(SPYRE_OPS)
    (tree / "twice.yaml").write_text(SPYRE_TWICE)
    (tree / "bad.yaml").write_text(SPYRE_BAD)
    (tree / "ci.yaml").write_text("jobs: {build: {}}\n")
    script = [sys.executable, str(ROOT / "bench" / "spyre_configs.py")]
    done = subprocess.run([*script, str(tmp_path)], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    assert "(1 other YAML files left alone)" in out
    for line in ("found          3", "imported       3", "validated      2", "failed         1"):
        assert line in out, out
    assert "FAILED (validate) tests/configs/bad.yaml:" in out
    assert "mode must be one of" in out.split("FAILED (validate) tests/configs/bad.yaml:")[1]
    # Listed twice with two modes: the first entry's, as in Spyre, and a line says so.
    assert "'TestTwice::test_one' (skip) dropped: the entry at line 6 gives it xfail" in out
    assert "1  edits.ops.include: model-op items" in out
    assert "edits.ops.include               1        0" in out  # dropped with its item
    assert "global.supported_dtypes         1        1" in out
    skipped = subprocess.run(script, cwd=ROOT, capture_output=True, text=True,
                             env={**os.environ, "SPYRE_ROOT": ""}, timeout=60)  # fmt: skip
    assert skipped.returncode == 0 and skipped.stdout.startswith("skipped: no Torch Spyre tree")
