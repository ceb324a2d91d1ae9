"""The plugin's stand-in for torch's `extract_test_fn`: same answers, torch's failure notes kept."""

from __future__ import annotations

import json

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
