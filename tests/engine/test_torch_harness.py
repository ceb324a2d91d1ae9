"""The plugin's stand-in for torch's `extract_test_fn`: same answers, torch's failure notes kept."""

from __future__ import annotations

import json
import subprocess
import sys

from .conftest import clean_env, run_python

CHECK = """
import json, os, unittest
from torch.testing._internal import common_utils
from torch.testing._internal.opinfo import core
from crcr_reuse import torch_harness

torchs = common_utils.extract_test_fn
seen = {}

class TestSamples(unittest.TestCase):
    def test_second_sample_fails(self):
        samples = common_utils.TrackedInputIter(iter([10, 20, 30]), "sample input")
        seen["found"] = [f is TestSamples.test_second_sample_fails for f in
                         (samples.test_fn, torchs(), torch_harness.extract_test_fn())]
        try:
            for sample in samples:
                assert sample != 20
        except AssertionError:
            # What torch's @ops wrapper does with a failure: name the sample that caused it.
            tracked = common_utils.get_tracked_input()
            seen["tracked"] = [tracked.index, tracked.val]

TestSamples.test_second_sample_fails.tracked_input = None  # as torch's @ops gives each test

os.environ["CRCR_REUSE_TORCH_STACK"] = "1"
kept = torch_harness.install()
seen["kept"] = common_utils.extract_test_fn is torchs
del os.environ["CRCR_REUSE_TORCH_STACK"]
seen["installed"] = torch_harness.install() and all(
    m.extract_test_fn is torch_harness.extract_test_fn for m in (common_utils, core))
unittest.TextTestRunner(stream=open(os.devnull, "w")).run(TestSamples("test_second_sample_fails"))
seen["outside a test"] = [torchs(), torch_harness.extract_test_fn()]
print(json.dumps(seen))
"""


def test_the_stand_in_finds_the_running_test_and_torch_still_names_the_failing_sample():
    done = run_python(CHECK, clean_env())
    assert done.returncode == 0, done.output
    seen = json.loads(done.stdout.splitlines()[-1])
    assert seen["kept"] is True  # CRCR_REUSE_TORCH_STACK=1 keeps torch's own
    assert seen["installed"] is True
    assert seen["found"] == [True, True, True]
    assert seen["tracked"] == [1, 20]
    assert seen["outside a test"] == [None, None]


CAPTURED = """
import json, os
from torch.testing._internal.common_utils import TestCase, run_tests
from torch.testing._internal import common_utils
from torch.testing._internal.opinfo import core


class TestWhichStackWalk(TestCase):
    def test_records_it(self):
        with open(os.environ["SEEN"], "w") as out:
            json.dump([common_utils.extract_test_fn.__module__, core.extract_test_fn.__module__,
                       common_utils.extract_test_fn() is not None], out)
"""


def test_the_operator_capture_walks_the_stack_as_cheaply_as_a_device_run(tmp_path):
    (tmp_path / "test_walk.py").write_text(CAPTURED)
    seen = tmp_path / "seen.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "crcr_reuse.opcapture",
            f"--opcapture-out={tmp_path / 'ops.jsonl'}",
            "test_walk.py",
        ],
        cwd=tmp_path,
        env=clean_env(SEEN=str(seen)),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads(seen.read_text()) == ["crcr_reuse.torch_harness"] * 2 + [True]
    assert "TestWhichStackWalk" in (tmp_path / "ops.jsonl").read_text()
