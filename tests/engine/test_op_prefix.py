"""op_db names a few OpInfos with a "torch." prefix (torch._scaled_mm,
torch.ops.aten._safe_softmax.default). A config names an op with or without that prefix;
either way an `edits.ops.exclude` drops its variants. test_ops.py's real run found it: the
selection excluded both, and their variants ran and failed all the same."""

from __future__ import annotations

from pathlib import Path

from .conftest import clean_env, run_pytest

TEST = """\
from torch.testing._internal.common_device_type import OpDTypes, instantiate_device_type_tests, ops
from torch.testing._internal.common_methods_invocations import op_db
from torch.testing._internal.common_utils import TestCase

_NAMES = ("abs", "neg", "torch._scaled_mm", "torch.ops.aten._safe_softmax.default")
_ops = [op for op in op_db if op.name in _NAMES]


class TestPrefixed(TestCase):
    @ops(_ops, dtypes=OpDTypes.none)
    def test_named(self, device, op):
        pass


instantiate_device_type_tests(TestPrefixed, globals())
"""
CONFIG = """\
test_suite_config:
  files:
    - path: ${TORCH_ROOT}/test/test_prefixed.py
      tests:
        - names: [TestPrefixed::test_named]
          mode: mandatory_success
          edits:
            ops:
              exclude:
                - {name: torch._scaled_mm}
                - {name: ops.aten._safe_softmax.default}
                - {name: neg}
"""


def test_an_op_db_name_with_a_torch_prefix_is_excluded_as_the_config_names_it(
    tmp_path: Path,
) -> None:
    tree = tmp_path / "tree"
    (tree / "test").mkdir(parents=True)
    (tree / "test" / "test_prefixed.py").write_text(TEST)
    config = tmp_path / "config.yaml"
    config.write_text(CONFIG)
    run = run_pytest(
        ["--collect-only", "-q", f"--reuse-config={config}", "test/test_prefixed.py"],
        tmp_path,
        clean_env(TORCH_ROOT=str(tree)),
        tree=tree,
    )
    assert run.returncode == 0, run.output[-3000:]
    assert run.names() == {"test_named_abs_privateuseone"}
