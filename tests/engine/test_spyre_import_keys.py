"""Torch Spyre's newer keys through the importer: labels at three levels, `no_grad`,
`force_xfail` on one global dtype, bare names, `supported_modules`, and custom-module
inputs the reference device cannot honour (`device_layout`, `init: file`, HF configs).
The config is written here in Spyre's shapes, pointed at the bundled tree."""

from __future__ import annotations

from pathlib import Path

from crcr_reuse.loader import load_configs
from crcr_reuse.spyre import import_text

from .conftest import TREE

LINEAR = "transformers.models.granite.modeling_granite.GraniteMLP"

SPYRE = f"""\
test_suite_config:
  labels: [core, smoke, "suite_inductor", "bad label"]
  files:
    - path: ${{TORCH_ROOT}}/test/test_dtypes_reuse.py
      labels: [core]
      unlisted_test_mode: skip
      tests:
        - names: test_fill
          labels: [smoke]
          no_grad: true
        - names: [TestTensorBasics::test_add_matches_cpu]
          mode: xfail
          edits:
            modules:
              include:
                - name: GraniteMLP
                  module_path: {LINEAR}
                  constructor_inputs: {{args: [{{value: 8}}]}}
                  forward_inputs:
                    - args:
                        - tensor:
                            shape: [1, 4, 8]
                            dtype: torch.float16
                            init: randn
                            device_layout: {{device_size: [1, 4, 1, 64], stride_map: [8, 1, -1, 1], device_dtype: torch.float16}}
                    - args:
                        - tensor_list:
                            - {{shape: [2], dtype: float32, device_layout: {{device_size: [1], stride_map: [1], device_dtype: float32}}}}
                - name: FromFile
                  module_path: {LINEAR}
                  forward_inputs: {{args: [{{tensor: {{shape: [2], dtype: float32, init: file, init_args: {{path: w.pt}}}}}}]}}
                - name: WithConfig
                  module_path: {LINEAR}
                  constructor_inputs:
                    args: [{{config_path: transformers.GraniteConfig, config_kwargs: {{hidden_size: 8}}}}]
                    kwargs: {{past_key_values: {{cache: {{layers: 1}}}}}}
  global:
    supported_dtypes:
      - name: float32
      - name: float16
        force_xfail: true
    supported_modules:
      - torch.nn.Linear
      - {{name: torch.nn.ReLU, force_xfail: true}}
"""


def imported(tmp_path: Path) -> tuple[Path, str]:
    text, report = import_text(SPYRE, "keys.yaml")
    path = tmp_path / "imported.yaml"
    path.write_text(text)
    return path, report.text()


def counted(report: str) -> dict[str, int]:
    return {
        line.split(":")[0].split(maxsplit=1)[1]: int(line.split()[0])
        for line in report.splitlines()
        if line.startswith("  ")
    }


def test_the_newer_keys_import_and_keep_spyres_meaning(tmp_path: Path) -> None:
    path, _ = imported(tmp_path)
    config = load_configs([path], {"TORCH_ROOT": str(TREE)})
    assert config.labels == ("core", "smoke")
    entry = config.files[0]
    fill, add = entry.tests
    assert entry.labels == ("core",)
    assert (fill.labels, fill.no_grad, fill.mode) == (("smoke",), True, "mandatory_success")
    assert fill.names[0].cls is None  # a bare method name
    assert fill.group_labels == ("core",)
    dtypes = {d.name: d.force_xfail for d in config.global_.supported_dtypes or ()}
    assert dtypes == {"float32": False, "float16": True}
    assert [m.name for m in config.global_.supported_modules or ()] == [
        "torch.nn.Linear",
        "torch.nn.ReLU",
    ]
    # The module crcr can build stays, its tensors without device_layout.
    (mlp,) = add.edits.modules.include
    assert mlp.name == "GraniteMLP" and mlp.inputs is not None
    assert "device_layout" not in path.read_text()


def test_what_the_reference_device_cannot_honour_is_reported_once_per_key(
    tmp_path: Path,
) -> None:
    text, report = import_text(SPYRE, "a.yaml")
    import_text(SPYRE, "b.yaml", report)
    found = counted(report.text())
    assert found["edits.modules.include.inputs.device_layout"] == 4  # 2 tensors x 2 configs
    assert found["edits.modules.include.inputs.init_file"] == 2
    assert found["edits.modules.include.inputs.config_path"] == 2
    assert found["edits.modules.include.inputs.cache"] == 2
    assert found["labels.invalid"] == 4  # "suite_inductor" and "bad label", twice
    assert found["supported_modules.force_xfail"] == 2  # Spyre never reads it either
    lines = report.text().splitlines()
    layout = next(line for line in lines if "inputs.device_layout" in line)
    assert "plain strided memory" in layout
    assert sum(1 for line in lines if "inputs.device_layout" in line) == 1
    assert not any("no_grad" in line or ".labels" in line for line in lines)
