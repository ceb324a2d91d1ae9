# Owner(s): ["module: crcr demo"]
# ModuleInfo-based tests over a slice of module_db, in the style of test_modules.py.

import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_modules import module_db, modules
from torch.testing._internal.common_utils import TestCase, run_tests

_modules = [m for m in module_db if m.module_cls in (torch.nn.Linear, torch.nn.ReLU, torch.nn.Tanh)]


class TestModulesReuse(TestCase):
    @modules(_modules, allowed_dtypes=(torch.float32, torch.float64))
    def test_forward_matches_cpu(self, device, dtype, module_info, training):
        inputs = module_info.module_inputs_func(
            module_info, device=device, dtype=dtype, requires_grad=False, training=training
        )
        for module_input in inputs[:2]:
            args, kwargs = module_input.constructor_input.args, module_input.constructor_input.kwargs
            module = module_info.module_cls(*args, **kwargs).to(device=device, dtype=dtype)
            module.train(training)
            cpu_module = module_info.module_cls(*args, **kwargs).to(dtype=dtype)
            cpu_module.load_state_dict({k: v.cpu() for k, v in module.state_dict().items()})
            forward_args = module_input.forward_input.args
            forward_kwargs = module_input.forward_input.kwargs
            actual = module(*forward_args, **forward_kwargs)
            expected = cpu_module(
                *(a.cpu() for a in forward_args), **{k: v.cpu() for k, v in forward_kwargs.items()}
            )
            self.assertEqual(actual, expected, exact_device=False)


instantiate_device_type_tests(TestModulesReuse, globals())

if __name__ == "__main__":
    run_tests()
