"""Every `description` of a config is kept: the loader reads it with its position, `explain`
shows it beside what it explains, and `merge` and the Spyre importer write it back."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from crcr_reuse.cli import main
from crcr_reuse.document import config_document
from crcr_reuse.loader import load_configs
from crcr_reuse.schema import Config, Description
from crcr_reuse.spyre import import_text

from .conftest import TREE

OPS, MODULES = f"{TREE}/test/test_ops_reuse.py", f"{TREE}/test/test_modules_reuse.py"
# A description on an item of every kind the loader reads (14 in all).
DESCRIBED = f"""\
test_suite_config:
  files:
    - path: {OPS}
      description: OpInfo tests of a slice of op_db.
      tests:
        - names: [TestOpsReuse::test_matches_cpu]
          mode: mandatory_success
          description: The device must match the CPU.
          edits:
            ops:
              include:
                - name: add
                  description: add has a device kernel.
                  dtypes:
                    - {{name: float32, description: add is exact in float32.}}
              exclude: [{{name: lgamma, description: no lgamma kernel yet.}}]
            dtypes:
              include: [{{name: bfloat16, precision: {{atol: 1e-2}}, description: bf16 needs a looser atol.}}]
              exclude: [{{name: int64, description: int64 add overflows on the device.}}]
            functions:
              cpu_move: [{{name: assertEqual, description: compare on the host.}}]
    - path: {MODULES}
      tests:
        - names: [TestModulesReuse::test_forward_matches_cpu]
          mode: mandatory_success
          edits:
            modules:
              include: [{{name: torch.nn.Tanh, description: Tanh is built from exp.}}]
              exclude: [{{name: torch.nn.ReLU, description: ReLU's backward is missing.}}]
  global:
    supported_dtypes:
      - name: float64
        description: float64 is emulated.
    supported_ops:
      - {{name: mul, description: mul is native.}}
      - {{name: sub, description: sub is native.}}
    supported_modules:
      - {{name: torch.nn.Linear, description: Linear runs on the matmul unit.}}
"""
VARIANTS = [
    f"{OPS}::TestOpsReusePRIVATEUSEONE::test_matches_cpu_add_privateuseone_float32",
    f"{OPS}::TestOpsReusePRIVATEUSEONE::test_matches_cpu_mul_privateuseone_float64",
    f"{OPS}::TestOpsReusePRIVATEUSEONE::test_matches_cpu_sub_privateuseone_bfloat16",
    f"{MODULES}::TestModulesReusePRIVATEUSEONE::test_forward_matches_cpu_nn_Linear_train_mode_privateuseone_float32",
    f"{MODULES}::TestModulesReusePRIVATEUSEONE::test_forward_matches_cpu_nn_ReLU_privateuseone_float64",
]


def descriptions(config: Config) -> list[tuple[str, Description]]:
    """Every description the loaded config keeps, with where it sits."""
    found: list[tuple[str, Any]] = []
    for entry in config.files:
        found.append((f"files {entry.path}", entry.description))
        for test in entry.tests:
            found.append((f"tests {test.names[0].text}", test.description))
            for kind in ("dtypes", "ops", "modules"):
                for way in ("include", "exclude"):
                    for item in getattr(getattr(test.edits, kind), way):
                        found.append((f"edits.{kind}.{way} {item.name}", item.description))
                        found += [(f"{item.name} dtype {d.name}", d.description)
                                  for d in getattr(item, "dtypes", None) or ()]  # fmt: skip
            found += [(f"cpu_move {n}", d) for n, d in test.edits.cpu_move_descriptions]
    for key in ("supported_dtypes", "supported_ops", "supported_modules"):
        for item in getattr(config.global_, key) or ():
            found.append((f"global.{key} {item.name}", item.description))
    return [(where, description) for where, description in found if description is not None]


@pytest.fixture
def described(tmp_path: Path) -> Path:
    path = tmp_path / "described.yaml"
    path.write_text(DESCRIBED)
    return path


def test_the_loader_keeps_every_description_with_its_position(described: Path) -> None:
    kept = descriptions(load_configs([described]))
    assert len(kept) == DESCRIBED.count("description:") == 14
    by_where = {where: description for where, description in kept}
    assert str(by_where["edits.ops.include add"].pos) == f"{described}:13:32"
    assert by_where["edits.ops.include add"].text == "add has a device kernel."
    assert str(by_where["global.supported_dtypes float64"].pos) == f"{described}:33:22"
    assert str(by_where["cpu_move assertEqual"].pos) == f"{described}:21:59"


def test_explain_shows_every_description_beside_what_it_decided(
    described: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    outputs = []
    for test_id in VARIANTS:
        assert main(["explain", test_id, "--config", str(described)]) == 0
        outputs.append(capsys.readouterr().out)
    kept = descriptions(load_configs([described]))
    shown = [d for _, d in kept if any(d.text in out for out in outputs)]
    assert f"{len(shown)} of 14" == "14 of 14"
    add, mul, sub, linear, relu = (out.splitlines() for out in outputs)
    assert f"reason: The device must match the CPU.  (its description, {described}:8:24)" in add
    assert f"  description ({described}:4:20): OpInfo tests of a slice of op_db." in add
    assert "variant op add: kept" in add
    assert (
        f"  op add included by edits.ops.include ({described}:12:19): add has a device kernel."
        in add
    )
    assert (
        f"  dtype float32 listed in op add's dtypes ({described}:15:23): add is exact in float32."
    ) in add
    assert f"  edits.ops.exclude lgamma ({described}:16:25): no lgamma kernel yet." in add
    assert (
        f"  edits.functions.cpu_move assertEqual ({described}:21:59): compare on the host." in add
    )
    assert f"  op mul listed in global.supported_ops ({described}:35:9): mul is native." in mul
    assert (
        f"  dtype float64 listed in global.supported_dtypes ({described}:32:9): float64 is emulated."
        in mul
    )
    assert "variant dtype bfloat16: kept" in sub
    assert (
        f"  dtype bfloat16 included by edits.dtypes.include ({described}:18:25): bf16 needs a looser atol."
        in sub
    )
    assert "variant module nn.Linear: kept" in linear
    assert (
        f"  module nn.Linear listed in global.supported_modules ({described}:38:9): Linear runs on the matmul unit."
        in linear
    )
    assert "variant dtype float32: filtered out" in linear
    assert "  dtype float32 not in global.supported_dtypes" in linear
    assert "variant module nn.ReLU: filtered out" in relu
    assert (
        f"  module nn.ReLU excluded by edits.modules.exclude ({described}:29:25): ReLU's backward is missing."
        in relu
    )
    assert (
        f"  edits.modules.include torch.nn.Tanh ({described}:28:25): Tanh is built from exp."
        in relu
    )


def test_merge_writes_every_description_back_and_it_loads_back_the_same(
    described: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["merge", str(described)]) == 0
    merged = tmp_path / "merged.yaml"
    merged.write_text(capsys.readouterr().out)
    original, again = load_configs([described]), load_configs([merged])
    assert [(w, d.text) for w, d in descriptions(again)] == [
        (w, d.text) for w, d in descriptions(original)
    ]
    assert len(descriptions(again)) == 14
    assert config_document(again) == config_document(original)


def test_a_global_item_described_in_a_later_config_only_keeps_that_description(
    tmp_path: Path,
) -> None:
    first, second = tmp_path / "first.yaml", tmp_path / "second.yaml"
    first.write_text("test_suite_config:\n  global:\n    supported_ops: [{name: mul}]\n")
    second.write_text(
        "test_suite_config:\n  global:\n    supported_ops: [{name: mul, description: native}]\n"
    )
    [mul] = load_configs([first, second]).global_.supported_ops or ()
    assert mul.description is not None and mul.description.text == "native"
    assert str(mul.description.pos) == f"{second}:3:46"


SPYRE = """\
test_suite_config:
  files:
    - path: ${TORCH_ROOT}/test/test_ops_reuse.py
      tests:
        - names: TestOpsReuse::test_matches_cpu
          description: numerics checked against the CPU
          edits:
            ops:
              include:
                - {name: add, description: add has a kernel}
              exclude:
                - {name: lgamma, description: no kernel}
            modules:
              include:
                - {name: torch.nn.Tanh, description: tanh from exp}
  global:
    supported_dtypes:
      - {name: float16, description: the device's native type}
"""


def test_a_spyre_configs_descriptions_survive_the_import_and_the_loader(tmp_path: Path) -> None:
    text, _ = import_text(SPYRE, "spyre.yaml")
    path = tmp_path / "imported.yaml"
    path.write_text(text)
    kept = descriptions(load_configs([path], {"TORCH_ROOT": str(TREE)}))
    assert [(where, d.text) for where, d in kept] == [
        ("tests TestOpsReuse::test_matches_cpu", "numerics checked against the CPU"),
        ("edits.ops.include add", "add has a kernel"),
        ("edits.ops.exclude lgamma", "no kernel"),
        ("edits.modules.include torch.nn.Tanh", "tanh from exp"),
        ("global.supported_dtypes float16", "the device's native type"),
    ]
