# Owner(s): ["module: crcr demo"]
# OpInfo-based tests over a slice of op_db, in the style of PyTorch's test_ops.py.

from itertools import islice

import torch
from torch.testing._internal.common_device_type import (
    OpDTypes,
    instantiate_device_type_tests,
    onlyNativeDeviceTypes,
    ops,
)
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import TestCase, run_tests

_NAMES = ("add", "sub", "mul", "div", "abs", "neg", "exp", "sin", "maximum", "hypot", "lgamma")
_ops = [op for op in op_db if op.name in _NAMES and op.variant_test_name in ("", "no_rounding_mode")]


def _cpu(value):
    return value.cpu() if isinstance(value, torch.Tensor) else value


class TestOpsReuse(TestCase):
    @ops(_ops, allowed_dtypes=(torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64))
    def test_matches_cpu(self, device, dtype, op):
        for sample in islice(op.sample_inputs(device, dtype), 3):
            actual = op(sample.input, *sample.args, **sample.kwargs)
            cpu_sample = sample.transform(_cpu)
            expected = op(cpu_sample.input, *cpu_sample.args, **cpu_sample.kwargs)
            self.assertEqual(actual, expected, exact_device=False)

    @onlyNativeDeviceTypes
    @ops(_ops, dtypes=OpDTypes.none)
    def test_returns_device_tensors(self, device, op):
        sample = next(iter(op.sample_inputs(device, torch.float32)))
        result = op(sample.input, *sample.args, **sample.kwargs)
        self.assertEqual(result.device.type, torch.device(device).type)


instantiate_device_type_tests(TestOpsReuse, globals())

if __name__ == "__main__":
    run_tests()
