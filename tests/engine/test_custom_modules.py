"""Custom modules (`edits.modules.include` with `module_path`): built from the config's input
specs and run by an upstream-style `@modules` test on the reference device."""

from __future__ import annotations

from pathlib import Path

from crcr_reuse.inputs import build_invocation
from crcr_reuse.loader import load_configs

from .conftest import run_pytest

# In the style of PyTorch's test_modules.py::TestModule::test_forward (no reference_fn:
# the reference device cannot deepcopy its tensors, which that comparison does).
MODULES_TEST = """\
from operator import methodcaller

import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_modules import module_db, modules
from torch.testing._internal.common_utils import TestCase, freeze_rng_state, run_tests


class TestModule(TestCase):
    @modules([m for m in module_db if m.module_cls is torch.nn.ReLU])
    def test_forward(self, device, dtype, module_info, training):
        module_cls = module_info.module_cls
        module_inputs = module_info.module_inputs_func(
            module_info, device=device, dtype=dtype, requires_grad=False, training=training
        )
        for module_input in module_inputs:
            with freeze_rng_state():
                args = module_input.constructor_input.args
                m = module_cls(*args, **module_input.constructor_input.kwargs)
                m.to(device).to(dtype)
                m.train(training)
                args, kwargs = module_input.forward_input.args, module_input.forward_input.kwargs
                m(*args, **kwargs)
                if dtype is torch.float32:
                    methodcaller("float")(m)
                    m(*args, **kwargs)
                for parameter in m.parameters():
                    self.assertEqual(parameter.device.type, torch.device(device).type)
                    self.assertEqual(parameter.dtype, dtype)


instantiate_device_type_tests(TestModule, globals())

if __name__ == "__main__":
    run_tests()
"""
# A model's own layer and config class, as transformers has them (importable from test/).
LAYERS = """\
import torch


class ScaleConfig:
    factor = 2.0
    hidden = 6


class Scale(torch.nn.Module):
    def __init__(self, config, bias=0):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.full((config.hidden,), config.factor))
        self.bias = bias

    def forward(self, x, position_ids=None, pair=None, dims=None):
        # What the config wrote, as the module receives it.
        assert x.device.type != "cpu" and x.dtype == torch.bfloat16, (x.device, x.dtype)
        assert (x.stride(), x.storage_offset()) == ((1, 3), 2), (x.stride(), x.storage_offset())
        assert position_ids.dtype == torch.int64 and position_ids.device.type != "cpu"
        assert 0 <= int(position_ids.min()) and int(position_ids.max()) < 7
        assert [(t.shape, t.device.type) for t in pair] == [((2,), "cpu"), ((2,), "cpu")]
        assert dims == (1, slice(None, 2)), dims
        return x * self.weight[:2].to(x.dtype) + self.bias
"""
CONFIG = """\
test_suite_config:
  files:
    - path: test/test_modules_custom.py
      tests:
        - names: [TestModule::test_forward]
          mode: mandatory_success
          edits:
            modules:
              include:
                - name: Linear_4x3
                  module_path: torch.nn.Linear
                  constructor_inputs: {args: [{value: 4}, {value: 3}], kwargs: {bias: true}}
                  forward_inputs:
                    - args: [{tensor: {shape: [2, 4], dtype: torch.float32, device: spyre, init: randn}}]
                    - args: [{tensor: {shape: [5, 4], dtype: float32, init: rand}}]
                - name: Scaled
                  module_path: crcr_layers.Scale
                  constructor_inputs:
                    args: [{value: "<config:crcr_layers.ScaleConfig>"}]
                    kwargs: {bias: 1}
                  forward_inputs:
                    args:
                      - tensor: {shape: [3, 2], dtype: torch.bfloat16, init: randn, stride: [1, 3], storage_offset: 2}
                    kwargs:
                      position_ids: {tensor: {shape: [1, 4], dtype: torch.int64, init: randint, init_args: {high: 7}}}
                      pair:
                        tensor_list:
                          - {shape: [2], dtype: float32, device: cpu, init: ones}
                          - {shape: [2], dtype: float32, device: cpu, init: zeros}
                      dims: {py: "(1, slice(None, 2))"}
                - name: Missing
                  module_path: crcr_absent_package.layers.Thing
                  forward_inputs: {args: [{tensor: {shape: [2], dtype: float32}}]}
  global:
    supported_dtypes: [{name: float32}]
"""


def test_custom_modules_run_in_an_upstream_modules_test_and_a_missing_one_fails_clearly(
    tmp_path: Path,
) -> None:
    tree = tmp_path / "tree"
    (tree / "test").mkdir(parents=True)
    (tree / "test" / "test_modules_custom.py").write_text(MODULES_TEST)
    (tree / "test" / "crcr_layers.py").write_text(LAYERS)
    (tree / "pytest.ini").write_text("[pytest]\n")
    config = tree / "crcr.yaml"
    config.write_text(CONFIG)
    run = run_pytest([f"--reuse-config={config}"], tmp_path, tree=tree)
    records = {r["nodeid"].rsplit("::", 1)[1]: r for r in run.report["tests"]}
    outcomes = {name: record["outcome"] for name, record in records.items()}
    assert outcomes == {
        # Built from torch.nn.Linear with the config's inputs, on the device; two invocations.
        "test_forward_Linear_4x3_privateuseone_float32": "passed",
        # In the dtype its inputs are written in, though the global list has only float32;
        # its forward checked the strided tensor, the kwargs tensors and the config instance.
        "test_forward_Scaled_privateuseone_bfloat16": "passed",
        # The test's own module list is kept (its float64 variant filtered as usual).
        "test_forward_nn_ReLU_privateuseone_float32": "passed",
        "test_forward_Missing_privateuseone_float32": "failed",
    }, run.output
    missing = records["test_forward_Missing_privateuseone_float32"]["message"]
    assert (
        f"module_path 'crcr_absent_package.layers.Thing' of custom module 'Missing' ({config}:"
        in missing
    )
    assert "does not import here: ModuleNotFoundError" in missing
    scaled = records["test_forward_Scaled_privateuseone_bfloat16"]
    assert scaled["module"] == "Scaled" and "module__Scaled" in scaled["markers"]
    assert "filtered out by dtype/op/module rules: 1 variants" in run.output


SPECS = """\
test_suite_config:
  files:
    - path: test.py
      tests:
        - names: [test_forward]
          mode: mandatory_success
          edits:
            modules:
              include:
                - name: Mixed
                  module_path: torch.nn.Identity
                  forward_inputs:
                    - args:
                        - {tensor: {shape: [4, 3], dtype: int64, init: randint, init_args: {low: 5, high: 9}}}
                        - {tensor: {shape: [2, 2], dtype: float16, init: randn, stride: [1, 2], storage_offset: 3}}
                      kwargs: {dtype: torch.bfloat16, device: spyre, size: "(2, 3)", label: cpu_only}
                    - args: [{tensor: {shape: [3], dtype: torch.bfloat16, init: arange}}]
"""


def test_input_specs_build_the_same_tensors_every_time_as_written(tmp_path: Path) -> None:
    import torch

    (tmp_path / "test.py").write_text("")
    (tmp_path / "crcr.yaml").write_text(SPECS)
    spec = load_configs([tmp_path / "crcr.yaml"]).files[0].tests[0].edits.modules.include[0]
    assert spec.inputs is not None and spec.inputs.dtypes == ("float16", "bfloat16")
    first, second = spec.inputs.forward

    def build() -> tuple[list, dict]:
        return build_invocation(spec, first, "forward0", "cpu", requires_grad=True)

    (ints, halves), kwargs = build()
    (ints_again, halves_again), _ = build()
    assert torch.equal(ints, ints_again) and torch.equal(halves, halves_again)
    assert ints.dtype == torch.int64 and int(ints.min()) >= 5 and int(ints.max()) < 9
    assert (halves.stride(), halves.storage_offset(), halves.dtype) == ((1, 2), 3, torch.float16)
    assert halves.requires_grad and not ints.requires_grad
    # Bare kwargs read as Spyre reads them: a dtype name, the test's device, a literal.
    assert kwargs == {"dtype": torch.bfloat16, "device": "cpu", "size": (2, 3), "label": "cpu_only"}
    (counted,), _ = build_invocation(spec, second, "forward1", "cpu", requires_grad=False)
    assert counted.tolist() == [0.0, 1.0, 2.0] and counted.dtype == torch.bfloat16
