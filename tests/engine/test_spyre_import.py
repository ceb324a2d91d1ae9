"""Torch Spyre's configs imported into crcr's strict form, with Spyre's meaning kept.

The config below is written in the shapes the published Spyre configs use (model-op
samples, op-level tags, custom modules, cpu_move, `cases`, free-form labels, glob-like
class parts, Spyre's defaults), pointed at the bundled upstream-style tree."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from crcr_reuse.cli import main
from crcr_reuse.loader import ConfigError, load_configs
from crcr_reuse.spyre import ImportProblem, import_text

from .conftest import TREE

SPYRE = """\
test_suite_config:
  labels: [full, trunk]
  files:
    - path: ${TORCH_ROOT}/test/test_plain_reuse.py
      labels: [full]
      tests:
        # Why: the sum kernel is exact.
        - names: TestPlainMath::test_sum
        - names: ['*TestPlain*::test_wrong_on_purpose']
          mode: xfail
          description: asserts 11 == 10 on purpose
          tags: [issue-2508, "not a marker"]
        - names: [TestSpyreModelOps::test_model_ops_db]
          mode: mandatory_success
          edits:
            ops:
              include:
                - name: torch.mul
                  description: mul of two fp16 tensors
                  tags: [fp32operation, torch.mul.3]
                  sample_inputs_func:
                    args:
                      - tensor: {shape: [2, 3], dtype: float16, device: spyre, init: rand}
                  kwargs: {dim: 1}
              exclude:
                - {name: lgamma, description: no kernel}
            modules:
              include:
                - name: GraniteRMSNorm
                  description: the model's norm
                  module_path: transformers.models.granite.modeling_granite.GraniteRMSNorm
                  constructor_inputs: {args: [{value: 64}]}
            functions:
              cpu_move: [{name: assertEqual}]
  global:
    supported_ops: [add, {name: sub, force_xfail: true}]
    supported_dtypes:
      - {name: float16, description: the device's native type, precision: {atol: 1e-2, rtol: "1e-2"}}
    input_config: {seed: 42}
cases: []
"""


def imported(tmp_path: Path) -> tuple[Path, str]:
    text, report = import_text(SPYRE, "spyre_config.yaml")
    path = tmp_path / "imported.yaml"
    path.write_text(text)
    return path, report.text()


def test_a_spyre_config_imports_validates_and_keeps_its_meaning(tmp_path):
    path, report = imported(tmp_path)
    config = load_configs([path], {"TORCH_ROOT": str(TREE)})
    entry = config.files[0]
    # Spyre's defaults written out: unlisted tests xfail, an entry without mode must pass.
    assert entry.unlisted_test_mode == "xfail"
    sum_entry, wrong, model_ops = entry.tests
    assert (
        sum_entry.mode == "mandatory_success"
        and sum_entry.reason == "Why: the sum kernel is exact."
    )
    # The class pattern Spyre never matched is gone: the method matches in every class.
    assert [n.text for n in wrong.names] == ["test_wrong_on_purpose"]
    assert wrong.reason == "asserts 11 == 10 on purpose"
    assert wrong.tags == ("issue-2508",)
    # Labels are kept at every level: crcr selects by them (--reuse-labels) as Spyre does.
    assert config.labels == ("full", "trunk") and entry.labels == ("full",)
    # Model-op items (sample inputs: Spyre's model-ops test only) dropped; excludes kept.
    assert not model_ops.edits.ops.include
    assert [o.name for o in model_ops.edits.ops.exclude] == ["lgamma"]
    # A custom module keeps its import path and its inputs.
    (norm,) = model_ops.edits.modules.include
    assert norm.name == "GraniteRMSNorm" and norm.inputs is not None
    assert norm.inputs.module_path == "transformers.models.granite.modeling_granite.GraniteRMSNorm"
    assert norm.inputs.constructor.args[0].data == 64
    assert model_ops.edits.cpu_move == ("assertEqual",)
    assert [o.name for o in config.global_.supported_ops or ()] == ["add", "sub"]
    assert config.global_.supported_dtypes[0].precision.rtol == 0.01


def test_the_report_groups_what_was_dropped_once_per_key_with_a_count(tmp_path):
    text, report = import_text(SPYRE, "a.yaml")
    import_text(SPYRE, "b.yaml", report)  # two configs, one report
    lines = report.text().splitlines()
    assert lines[0] == "imported 2 Torch Spyre config(s)"
    counted = {line.split(":")[0].split(maxsplit=1)[1]: int(line.split()[0]) for line in lines
               if line.startswith("  ")}  # fmt: skip
    assert counted["edits.ops.include"] == 2
    assert counted["edits.ops.include.sample_inputs_func"] == 2
    assert counted["edits.ops.include.kwargs"] == 2
    assert "edits.modules.include.module_path" not in counted  # kept: a custom module
    assert counted["edits.modules.include with module_path"] == 2
    assert counted["edits.modules.include"] == 2  # crcr does not narrow @modules lists
    assert counted["cases"] == 2 and counted["global.input_config"] == 2
    assert "files.labels" not in counted and counted["tags.invalid"] == 2
    assert counted["names.class_pattern"] == 2
    assert counted["mode"] == 2  # "mode: mandatory_success (Spyre's default)", written out
    assert sum(1 for line in lines if "edits.ops.include.tags" in line) == 1


def test_explain_shows_the_description_as_the_reason_and_spyres_unlisted_mode(tmp_path, capsys):
    path, _ = imported(tmp_path)
    explain = ["explain", "--config", str(path), "--torch-root", str(TREE)]
    assert (
        main([*explain, f"{TREE}/test/test_plain_reuse.py::TestPlainMath::test_wrong_on_purpose"])
        == 0
    )
    out = capsys.readouterr().out
    assert "mode: xfail" in out and "reason: asserts 11 == 10 on purpose" in out
    assert main([*explain, f"{TREE}/test/test_plain_reuse.py::TestPlainStrings::test_sum"]) == 0
    assert "mode: xfail" in capsys.readouterr().out  # unlisted: Spyre's xfail, not crcr's skip


def test_the_command_imports_a_folder_and_prints_the_report(tmp_path, capsys):
    source = tmp_path / "spyre" / "configs"
    source.mkdir(parents=True)
    (source / "ops.yaml").write_text(SPYRE)
    (source / "ci.yaml").write_text("jobs: {build: {}}\n")  # not a config: left alone
    out = tmp_path / "crcr"
    assert main(["import-spyre", str(source), "-o", str(out)]) == 0
    assert "imported 1 Torch Spyre config(s)" in capsys.readouterr().out
    written = out / "configs" / "ops.yaml"
    assert load_configs([written], {"TORCH_ROOT": str(TREE)}).files[0].unlisted_test_mode == "xfail"
    assert not (out / "configs" / "ci.yaml").exists()


def test_the_raw_spyre_config_is_refused_by_crcr_naming_the_importer(tmp_path):
    raw = tmp_path / "raw.yaml"
    raw.write_text(SPYRE)
    with pytest.raises(ConfigError) as refused:
        load_configs([raw], {"TORCH_ROOT": str(TREE)})
    assert "import-spyre" in str(refused.value)


def test_what_is_not_a_spyre_config_is_refused_and_nothing_written(tmp_path, capsys):
    with pytest.raises(ImportProblem, match="no top-level 'test_suite_config'"):
        import_text("jobs: {}\n", "ci.yaml")
    with pytest.raises(ImportProblem, match="not YAML"):
        import_text("a: [\n", "broken.yaml")
    broken = tmp_path / "broken.yaml"
    broken.write_text("test_suite_config: [\n")
    assert main(["import-spyre", str(broken), "-o", str(tmp_path / "out.yaml")]) == 2
    assert "broken.yaml: not YAML" in capsys.readouterr().err
    assert not (tmp_path / "out.yaml").exists()
    assert yaml.safe_load(SPYRE)["cases"] == []  # the source is left as it was


HOST_TESTS = """\
import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase, run_tests


class TestHostCompare(TestCase):
    def assertOnHost(self, tensor):
        self.assertEqual(tensor.device.type, "cpu")

    def test_moved(self, device):
        self.assertOnHost(torch.ones(2, device=device))

    def test_not_moved(self, device):
        self.assertOnHost(torch.ones(2, device=device))


instantiate_device_type_tests(TestHostCompare, globals())

if __name__ == "__main__":
    run_tests()
"""
CPU_MOVE = """\
test_suite_config:
  files:
    - path: test/test_host.py
      tests:
        - names: [TestHostCompare::test_moved]
          edits:
            functions:
              cpu_move: [{name: assertOnHost, description: compare on the host}]
        - names: [TestHostCompare::test_not_moved]
"""


def test_cpu_move_compares_the_listed_tests_on_the_cpu_and_no_other(tmp_path):
    """A Spyre config's cpu_move, imported and run on the reference device: the listed
    method gets CPU tensors in the listed test only (Spyre patches the whole class)."""
    from .conftest import run_pytest

    tree = tmp_path / "tree"
    (tree / "test").mkdir(parents=True)
    (tree / "test" / "test_host.py").write_text(HOST_TESTS)
    (tree / "pytest.ini").write_text("[pytest]\n")
    text, report = import_text(CPU_MOVE, "host.yaml")
    assert "edits.functions" not in report.text()
    config = tree / "crcr.yaml"
    config.write_text(text)
    assert "cpu_move" in text and load_configs([config]).files[0].tests[0].edits.cpu_move == (
        "assertOnHost",
    )
    run = run_pytest([f"--reuse-config={config}"], tmp_path, tree=tree)
    outcomes = {name.split("_privateuse")[0]: r["outcome"] for name, r in
                ((r["nodeid"].rsplit("::", 1)[1], r) for r in run.report["tests"])}  # fmt: skip
    assert outcomes == {"test_moved": "passed", "test_not_moved": "failed"}, run.output


# An excerpt of a published Spyre module_tests config (granite_3_3_8b_instruct_spyre.yaml,
# trimmed): custom modules shared by two files through a YAML anchor.
MODULE_TESTS = """\
# Auto-generated unified test configuration for granite_3_3_8b_instruct
test_suite_config:
  files:
    - path: ${TORCH_ROOT}/test/test_modules.py
      unlisted_test_mode: skip
      tests:
        - names:
            - '*TestModule*::test_forward'
          mode: mandatory_success
          tags:
            - model__granite_3_3_8b_instruct
          edits:
            modules:
              include: &id001
                - name: GraniteRotaryEmbedding_64892356
                  module_path: transformers.models.granite.modeling_granite.GraniteRotaryEmbedding
                  description: 'Module: transformers.models.granite.modeling_granite.GraniteRotaryEmbedding'
                  constructor_inputs:
                    args:
                      - value: <config:transformers.models.granite.configuration_granite.GraniteConfig>
                    kwargs: {}
                  forward_inputs:
                    - args:
                        - tensor:
                            shape: [1, 128, 4096]
                            stride: null
                            storage_offset: 0
                            dtype: torch.bfloat16
                            device: spyre
                            init: randn
                      kwargs:
                        position_ids:
                          tensor:
                            shape: [1, 128]
                            stride: null
                            storage_offset: 0
                            dtype: torch.int64
                            device: spyre
                            init: randint
                            init_args:
                              high: 10000
                    - args:
                        - tensor: {shape: [1, 1, 4096], stride: null, storage_offset: 0, dtype: torch.bfloat16, device: spyre, init: randn}
                      kwargs:
                        position_ids:
                          tensor: {shape: [1, 1], stride: null, storage_offset: 0, dtype: torch.int64, device: spyre, init: randint, init_args: {high: 10000}}
                - name: GraniteAttention_layer0
                  module_path: transformers.models.granite.modeling_granite.GraniteAttention
                  description: 'Module: transformers.models.granite.modeling_granite.GraniteAttention'
                  apply_device_layout: true
                  constructor_inputs:
                    args:
                      - value: <config:transformers.models.granite.configuration_granite.GraniteConfig>
                    kwargs:
                      layer_idx: 0
                  forward_inputs:
                    - args: []
                      kwargs:
                        hidden_states:
                          tensor: {shape: [1, 128, 4096], stride: null, storage_offset: 0, dtype: torch.bfloat16, device: spyre, init: randn}
                        position_embeddings:
                          tensor_list:
                            - {shape: [1, 128, 128], stride: null, storage_offset: 0, dtype: torch.bfloat16, device: spyre, init: randint, init_args: {high: 10000}}
                            - {shape: [1, 128, 128], stride: null, storage_offset: 0, dtype: torch.bfloat16, device: spyre, init: randint, init_args: {high: 10000}}
    - path: ${TORCH_DEVICE_ROOT}/tests/test_modules_custom.py
      unlisted_test_mode: skip
      tests:
        - names:
            - '*TestModuleCustom*::test_eager_vs_compile'
          mode: mandatory_success
          tags:
            - model__granite_3_3_8b_instruct
            - custom_tests
          edits:
            modules:
              include: *id001
  global:
    supported_dtypes:
      - name: float16
        precision:
          atol: 0.005
          rtol: 0.005
    input_config:
      seed: 123
"""


def test_a_spyre_module_tests_config_keeps_its_custom_modules_and_validates(tmp_path):
    text, report = import_text(MODULE_TESTS, "granite_3_3_8b_instruct_spyre.yaml")
    path = tmp_path / "imported.yaml"
    path.write_text(text)
    for placeholder in ("torch/test/test_modules.py", "device/tests/test_modules_custom.py"):
        (tmp_path / placeholder).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / placeholder).write_text("")
    roots = {"TORCH_ROOT": str(tmp_path / "torch"), "TORCH_DEVICE_ROOT": str(tmp_path / "device")}
    upstream, custom = load_configs([path], roots).files
    (forward,) = upstream.tests
    assert [n.text for n in forward.names] == ["test_forward"]  # Spyre never matched the class
    rotary, attention = forward.edits.modules.include
    assert rotary.inputs is not None and attention.inputs is not None
    assert rotary.inputs.module_path.endswith("modeling_granite.GraniteRotaryEmbedding")
    assert rotary.inputs.constructor.args[0].data == (
        "<config:transformers.models.granite.configuration_granite.GraniteConfig>"
    )
    assert len(rotary.inputs.forward) == 2 and rotary.inputs.dtypes == ("bfloat16",)
    ((key, position_ids),) = rotary.inputs.forward[0].kwargs
    assert key == "position_ids" and position_ids.data.init == "randint"
    assert position_ids.data.high == 10000 and position_ids.data.shape == (1, 128)
    embeddings = dict(attention.inputs.forward[0].kwargs)["position_embeddings"]
    assert [spec.shape for spec in embeddings.tensors()] == [(1, 128, 128), (1, 128, 128)]
    # The anchor still shares the list: the device repository's test gets the same modules.
    assert [m.name for m in custom.tests[0].edits.modules.include] == [rotary.name, attention.name]
    assert "&id001" in text and "*id001" in text
    shown = report.text()
    assert "edits.modules.include.apply_device_layout: Spyre's device layout flag" in shown
    assert "      4  edits.modules.include with module_path" in shown  # two modules, two files
    assert "global.input_config" in shown


SPYRE_OP_INCLUDES = """\
test_suite_config:
  files:
    - path: ${TORCH_ROOT}/test/test_ops_reuse.py
      tests:
        - names: [TestOpsReuse::test_returns_device_tensors]
          edits:
            ops:
              include:
                - name: atan2
                  description: inject atan2 - the test's list lacks it
                  tags: [binary_math, "not a marker"]
                - name: not_an_op_of_op_db
                - name: torch.mul
                  tags: [fp16operation]
                  sample_inputs_func:
                    args: [{tensor: {shape: [2], dtype: float16}}]
"""


def test_op_includes_naming_an_op_db_op_stay_with_their_tags(tmp_path):
    """The command checks names against torch's op_db (a subprocess: it imports torch's test
    machinery); without that check, the library keeps such includes unchecked."""
    import subprocess
    import sys

    from .conftest import ROOT, clean_env

    source = tmp_path / "ops.yaml"
    source.write_text(SPYRE_OP_INCLUDES)
    out = tmp_path / "crcr.yaml"
    done = subprocess.run(
        [sys.executable, "-m", "crcr_reuse", "import-spyre", str(source), "-o", str(out)],
        cwd=ROOT, env=clean_env(), capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (entry,) = load_configs([out], {"TORCH_ROOT": str(TREE)}).files[0].tests
    (atan2,) = entry.edits.ops.include
    assert (atan2.name, atan2.tags) == ("atan2", ("binary_math",))
    assert (
        "1  edits.ops.include.not_in_op_db: op includes naming no op of torch's op_db"
        in done.stdout
    )
    assert "1  edits.ops.include: model-op items" in done.stdout
    assert "1  edits.ops.include of an op in torch's op_db: crcr adds it" in done.stdout
    unchecked, report = import_text(SPYRE_OP_INCLUDES, "ops.yaml")
    assert "not_an_op_of_op_db" in unchecked and "torch.mul" not in unchecked
    assert "2  edits.ops.include naming an op, kept without checking" in report.text()


# The shape of Spyre's inductor-test_scatter_optimization.yaml: one test given xfail,
# then again in a later skip entry. Spyre applies the first entry for it, like crcr.
TWICE = """\
test_suite_config:
  files:
    - path: ${TORCH_ROOT}/test/test_plain_reuse.py
      unlisted_test_mode: skip
      tests:
        - names: [TestPlainMath::test_wrong_on_purpose]
          mode: xfail
        - names:
            - TestPlainMath::test_sum
            - TestPlainMath::test_wrong_on_purpose
          mode: skip
        - names: [TestPlainMath::test_wrong_on_purpose]
          mode: skip
"""


def test_a_name_a_later_entry_gives_another_mode_keeps_the_first_and_says_so(tmp_path):
    text, report = import_text(TWICE, "twice.yaml")
    path = tmp_path / "twice.yaml"
    path.write_text(text)
    entry = load_configs([path], {"TORCH_ROOT": str(TREE)}).files[0]  # no conflict left
    assert [(t.mode, [n.text for n in t.names]) for t in entry.tests] == [
        ("xfail", ["TestPlainMath::test_wrong_on_purpose"]),
        ("skip", ["TestPlainMath::test_sum"]),
    ]
    why = "(skip) dropped: the entry at line 6 gives it xfail, which Spyre and crcr both apply"
    assert report.notes == [
        f"twice.yaml:10:15: 'TestPlainMath::test_wrong_on_purpose' {why}",
        f"twice.yaml:12:19: 'TestPlainMath::test_wrong_on_purpose' {why}",  # its entry is gone
    ]
    assert text.count("test_wrong_on_purpose") == 1
