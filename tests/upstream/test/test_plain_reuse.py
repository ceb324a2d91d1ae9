# Owner(s): ["module: crcr demo"]
# Plain unittest-style tests (no device parametrization), as many PyTorch files have.

import os
import tempfile
from pathlib import Path

import torch
from torch.testing._internal.common_utils import (
    TestCase,
    instantiate_parametrized_tests,
    parametrize,
    run_tests,
)


class TestPlainMath(TestCase):
    def test_sum(self):
        self.assertEqual(torch.arange(5).sum().item(), 10)

    def test_wrong_on_purpose(self):
        self.assertEqual(torch.arange(5).sum().item(), 11)

    def test_passes_today(self):
        self.assertTrue(torch.ones(3).bool().all())


class TestPlainStrings(TestCase):
    def test_sum(self):
        self.assertEqual("".join(["a", "b"]), "ab")


class TestFlaky(TestCase):
    def test_flaky_counter(self):
        # Odd attempts fail, even ones pass (see ../README.md).
        default = os.path.join(tempfile.gettempdir(), "crcr-flaky-counter")
        path = Path(os.environ.get("CRCR_FLAKY_COUNTER", default))
        count = int(path.read_text() or 0) + 1 if path.exists() else 1
        path.write_text(str(count))
        self.assertEqual(count % 2, 0, f"attempt {count}: odd attempts fail")


@instantiate_parametrized_tests
class TestParametrizedPlain(TestCase):
    @parametrize("n", [1, 2, 3])
    def test_arange_length(self, n):
        self.assertEqual(len(torch.arange(n)), n)


if __name__ == "__main__":
    run_tests()
