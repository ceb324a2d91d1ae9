# Owner(s): ["module: crcr demo"]
# @dtypes-style device tests, in the style of PyTorch's test_view_ops.py.

import torch
from torch.testing import make_tensor
from torch.testing._internal.common_device_type import (
    dtypes,
    instantiate_device_type_tests,
    onlyCPU,
    onlyNativeDeviceTypes,
    precisionOverride,
)
from torch.testing._internal.common_dtype import all_types_and
from torch.testing._internal.common_utils import TestCase, parametrize, run_tests


class TestTensorBasics(TestCase):
    @dtypes(torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64)
    def test_add_matches_cpu(self, device, dtype):
        a = make_tensor((16, 16), device=device, dtype=dtype)
        b = make_tensor((16, 16), device=device, dtype=dtype)
        self.assertEqual(a + b, a.cpu() + b.cpu(), exact_device=False)

    @dtypes(*all_types_and(torch.half, torch.bfloat16, torch.bool))
    def test_fill(self, device, dtype):
        t = torch.empty(3, 5, device=device, dtype=dtype)
        t.fill_(1)
        self.assertEqual(t.cpu(), torch.ones(3, 5, dtype=dtype))

    @parametrize("dim", [0, 1])
    @dtypes(torch.float32, torch.float64)
    def test_sum_over_dim(self, device, dtype, dim):
        x = make_tensor((5, 7), device=device, dtype=dtype)
        self.assertEqual(x.sum(dim), x.cpu().sum(dim), exact_device=False)

    @precisionOverride({torch.float32: 1e-4})
    @dtypes(torch.float32)
    def test_matmul(self, device, dtype):
        a = make_tensor((8, 4), device=device, dtype=dtype)
        b = make_tensor((4, 3), device=device, dtype=dtype)
        self.assertEqual(a @ b, a.cpu() @ b.cpu(), exact_device=False)

    @onlyNativeDeviceTypes
    @dtypes(torch.float32)
    def test_view_shares_memory(self, device, dtype):
        t = torch.zeros(4, 4, device=device, dtype=dtype)
        v = t.view(16)
        v[5] = 3
        self.assertEqual(t[1, 1].item(), 3)

    @onlyCPU
    def test_cpu_only(self, device):
        self.assertEqual(torch.device(device).type, "cpu")

    def test_known_wrong_expectation(self, device):
        # Asserts something false on every device: a test to mark xfail.
        self.assertEqual(torch.ones(2, device=device).sum().item(), 3.0)

    def test_tensor_repr_mentions_device(self, device):
        self.assertIn(torch.device(device).type, repr(torch.ones(1, device=device)))


class TestCudaOnly(TestCase):
    def test_streams(self, device):
        torch.cuda.synchronize(device)


instantiate_device_type_tests(TestTensorBasics, globals())
instantiate_device_type_tests(TestCudaOnly, globals(), only_for="cuda")

if __name__ == "__main__":
    run_tests()
