"""Op-level tags: an `edits.ops.include` item's `tags` mark exactly its op's variants."""

from __future__ import annotations

from pathlib import Path

from .conftest import TREE, run_pytest

CONFIG = """\
test_suite_config:
  files:
    - path: ${TORCH_ROOT}/test/test_ops_reuse.py
      tests:
        - names: [TestOpsReuse::test_returns_device_tensors]
          mode: mandatory_success
          tags: [entry_tag]
          edits:
            ops:
              include:
                # In the test's @ops list already: only tagged.
                - {name: mul, tags: [fp32operation, model__granite]}
                # Not in it: added from op_db, and tagged.
                - {name: atan2, tags: [fp32operation]}
                - {name: sub}
"""


def test_an_op_tag_selects_exactly_that_ops_variants_with_the_entrys_tags(tmp_path: Path) -> None:
    config = tmp_path / "crcr.yaml"
    config.write_text(CONFIG)
    run = run_pytest(
        [f"--reuse-config={config}", f"--reuse-torch-root={TREE}", "-m", "fp32operation"], tmp_path
    )
    markers = {r["nodeid"].rsplit("::", 1)[1]: r["markers"] for r in run.report["tests"]}
    assert markers == {
        "test_returns_device_tensors_mul_privateuseone": [
            "op__mul", "entry_tag", "fp32operation", "model__granite", "mode__mandatory_success",
        ],
        "test_returns_device_tensors_atan2_privateuseone": [
            "op__atan2", "entry_tag", "fp32operation", "mode__mandatory_success",
        ],
    }, run.output  # fmt: skip
    # The other ops of the same test (sub, add, ...) were there and left out by -m alone.
    assert "2 passed, 11 deselected" in run.output
    assert 'name="crcr_tags" value="entry_tag fp32operation model__granite"' in run.junit
