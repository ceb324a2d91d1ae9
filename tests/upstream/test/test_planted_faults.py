# Owner(s): ["module: crcr demo"]
# Tests that misbehave on the reference device on purpose (see ../README.md).

import torch
from torch.testing import make_tensor
from torch.testing._internal.common_device_type import dtypes, instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase, run_tests


class TestPlantedFaults(TestCase):
    @dtypes(torch.float64)
    def test_addcmul_matches_cpu(self, device, dtype):
        a, b, c = (make_tensor((8, 8), device=device, dtype=dtype) for _ in range(3))
        expected = torch.addcmul(a.cpu(), b.cpu(), c.cpu(), value=0.5)
        self.assertEqual(torch.addcmul(a, b, c, value=0.5), expected, exact_device=False)

    @dtypes(torch.float32)
    def test_lerp_crashes_the_process(self, device, dtype):
        start = torch.zeros(4, device=device, dtype=dtype)
        end = torch.ones(4, device=device, dtype=dtype)
        self.assertEqual(torch.lerp(start, end, 0.5).cpu(), torch.full((4,), 0.5))

    def test_cumprod_hangs(self, device):
        x = torch.arange(1.0, 5.0, device=device)
        self.assertEqual(torch.cumprod(x, 0).cpu(), torch.tensor([1.0, 2.0, 6.0, 24.0]))

    @dtypes(torch.float32)
    def test_lgamma_is_unsupported(self, device, dtype):
        x = torch.linspace(0.5, 3.0, 6, device=device, dtype=dtype)
        self.assertEqual(torch.lgamma(x).cpu(), torch.lgamma(x.cpu()))


instantiate_device_type_tests(TestPlantedFaults, globals())

if __name__ == "__main__":
    run_tests()
