"""YAML past a limit (size, aliases, expanded nodes, depth) is refused before anything
expands it, naming the limit and where, by the loader, `validate` and the Spyre importer.

Each bomb stands for ~10^9 nodes once its aliases are expanded: a walk over it would not
end within any test's time, so a test that passes shows the check ran first."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from crcr_reuse.loader import ConfigError, load_configs
from crcr_reuse.spyre import ImportProblem, import_text
from crcr_reuse.yaml_limits import MAX_ALIASES, MAX_BYTES, YamlLimitError, check

from .conftest import TREE, clean_env


def _levels(first: str, each: str, count: int = 9) -> list[str]:
    """`&a <first>`, then `&b <each with *a>` … : every level repeats the one before."""
    names = "abcdefghijklmnopqrstuvwxyz"
    return [f"&{names[0]} {first}"] + [
        f"&{names[i]} " + each.replace("@", f"*{names[i - 1]}") for i in range(1, count)
    ]


def billion_laughs_spyre() -> str:
    """The classic: nine lists of ten aliases of the list before (10^9 scalars)."""
    levels = _levels("[l,l,l,l,l,l,l,l,l,l]", "[" + ",".join(["@"] * 10) + "]")
    return "test_suite_config:\n files: []\n x: [" + ",\n ".join(levels) + "]\n"


def sample_bomb_spyre() -> str:
    """A model-op sample of nested mappings whose 10^9 leaves are empty: the importer
    looks through every value of a sample for an input before it drops the item."""
    each = "{" + ", ".join(f"{key}: @" for key in "abcdefghij") + "}"
    levels = _levels("{" + ", ".join(f"{key}: " for key in "abcdefghij") + "}", each)
    samples = ",\n            ".join(f"x{i}: {level}" for i, level in enumerate(levels))
    return (
        "test_suite_config:\n  files:\n    - path: ${TORCH_ROOT}/test/test_plain_reuse.py\n"
        "      tests:\n        - names: [TestSpyreModelOps::test_model_ops_db]\n"
        "          edits:\n            ops:\n              include:\n"
        "                - name: torch.mul\n"
        f"                  sample_inputs_func: {{{samples}}}\n"
    )


def alias_bomb_crcr() -> str:
    """A 9.5 KB crcr config: ordinary entries, and a custom module whose keyword argument
    nests aliases nine deep (10^9 values)."""
    entries = "".join(
        f"        - names: [TestPlainMath::test_case_{i:03d}]\n          mode: xfail\n"
        f"          description: flaky on the device, see issue {1000 + i}\n"
        for i in range(66)
    )
    each = "{" + ", ".join(f"{key}: @" for key in "abcdefghij") + "}"
    levels = _levels("{" + ", ".join(f"{key}: 1" for key in "abcdefghij") + "}", each)
    kwargs = "".join(f"                      x{i}: {{value: {v}}}\n" for i, v in enumerate(levels))
    return (
        "test_suite_config:\n  files:\n    - path: ${TORCH_ROOT}/test/test_plain_reuse.py\n"
        "      unlisted_test_mode: skip\n      tests:\n" + entries + "        - names: "
        "[TestModule::test_forward]\n          mode: mandatory_success\n          edits:\n"
        "            modules:\n              include:\n                - name: Linear_4x3\n"
        "                  module_path: torch.nn.Linear\n                  constructor_inputs:\n"
        "                    args: [{value: 4}, {value: 3}]\n                    kwargs:\n" + kwargs
    )


def depth_bomb(depth: int = 10_000) -> str:
    return "test_suite_config: " + "[" * depth + "]" * depth + "\n"


def test_the_bombs_are_small() -> None:
    assert 9_000 < len(alias_bomb_crcr()) < 10_000
    assert len(billion_laughs_spyre()) <= 374
    assert len(sample_bomb_spyre()) < 1_100


def test_the_loader_refuses_a_nested_alias_config_naming_the_limit_and_the_alias(
    tmp_path: Path,
) -> None:
    config = tmp_path / "bomb.yaml"
    config.write_text(alias_bomb_crcr())
    with pytest.raises(ConfigError) as refused:
        load_configs([config], {"TORCH_ROOT": str(TREE)})
    [(pos, message)] = refused.value.problems
    line = alias_bomb_crcr().splitlines()[pos.line - 1]
    assert pos.file == str(config) and line[pos.column - 1 :].startswith("*")
    assert message.startswith("YAML limit: alias *")
    assert "past the limit of 1,000,000 nodes (MAX_NODES) with aliases expanded" in message


def test_a_depth_bomb_is_refused_by_the_depth_limit_not_a_recursion_error(
    tmp_path: Path,
) -> None:
    config = tmp_path / "deep.yaml"
    config.write_text(depth_bomb())
    with pytest.raises(ConfigError) as refused:
        load_configs([config])
    # At the 101st level, or at libyaml's own cap (1,000 levels), where it stops scanning.
    where = re.escape(str(config)) + ":1:(119|1019)"
    limit = "YAML limit: lists and mappings nest past the limit of 100 (MAX_DEPTH)"
    assert re.fullmatch(f"{where}: {re.escape(limit)}", str(refused.value))
    with pytest.raises(ImportProblem, match=r"deep.yaml:1:(119|1019): .*\(MAX_DEPTH\)"):
        import_text(depth_bomb(), "deep.yaml")


@pytest.mark.parametrize("bomb", [billion_laughs_spyre, sample_bomb_spyre])
def test_the_spyre_importer_refuses_an_alias_bomb_before_ruamel_reads_it(bomb) -> None:
    with pytest.raises(ImportProblem) as refused:
        import_text(bomb(), "laughs.yaml")
    assert str(refused.value).startswith("laughs.yaml:")
    assert "(MAX_NODES) with aliases expanded" in str(refused.value)


def test_an_alias_inside_the_node_it_names_and_too_many_aliases_are_refused() -> None:
    with pytest.raises(YamlLimitError, match=r"^c.yaml:1:11: .*\*a is inside the node it names"):
        check("a: &a [1, *a]\n", "c.yaml")
    many = "a: &a 1\nb: [" + ", ".join(["*a"] * (MAX_ALIASES + 1)) + "]\n"
    with pytest.raises(YamlLimitError, match=r"more aliases than the limit of 100,000"):
        check(many, "many.yaml")
    with pytest.raises(YamlLimitError, match=r"^big.yaml:1:\d+: YAML limit: the text is"):
        check("a: '" + "x" * MAX_BYTES + "'\n", "big.yaml")


def test_a_two_megabyte_spyre_config_with_anchors_is_within_the_limits() -> None:
    """The size of Torch Spyre's largest model configs, shaped like them."""
    item = (
        "                - name: torch.conv2d\n                  precision: *precision\n"
        "                  sample_inputs_func:\n                    args:\n"
        "                      - tensor:\n                          shape: [1, 3, 392, 532]\n"
        "                          stride: [3, 1, 1596, 3]\n                          dtype: torch.float16\n"
        "                      - value: (14, 14)\n"
        "                  tags: [constant, torch.conv2d.{}_spyre]\n"
    )
    head = (
        "test_suite_config:\n  global:\n    supported_dtypes:\n      - name: float16\n"
        "        precision: &precision {atol: 0.005, rtol: 0.005}\n  files:\n"
        "    - path: ${TORCH_DEVICE_ROOT}/tests/models/test_model_ops_v2.py\n      tests:\n"
        "        - names: [TestSpyreModelOps::test_model_ops_db]\n          edits:\n"
        "            ops:\n              include:\n"
    )
    text = head + "".join(item.format(i) for i in range(2_000_000 // len(item)))
    assert len(text) > 1_900_000
    check(text, "model.yaml")
    check(text, "model.yaml", ruamel=True)


def test_a_config_with_anchors_and_aliases_still_loads(tmp_path: Path) -> None:
    config = tmp_path / "anchors.yaml"
    config.write_text(
        "test_suite_config:\n  files:\n    - path: ${TORCH_ROOT}/test/test_plain_reuse.py\n"
        "      tests:\n        - names: &sum [TestPlainMath::test_sum]\n"
        "          mode: &mode xfail\n  global:\n"
        "    supported_dtypes: [{name: float32, precision: &tight {atol: 0.001}},"
        " {name: float64, precision: *tight}]\n"
    )
    loaded = load_configs([config], {"TORCH_ROOT": str(TREE)})
    assert [t.mode for t in loaded.files[0].tests] == ["xfail"]


def _command(folder: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "crcr_reuse", *argv],
        cwd=folder,
        env=clean_env(TORCH_ROOT=str(TREE)),
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


@pytest.fixture(scope="module")
def cli_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """`python -m crcr_reuse validate` on the crcr bomb, `import-spyre` on the Spyre one."""
    folder = tmp_path_factory.mktemp("cli")
    (folder / "bomb.yaml").write_text(alias_bomb_crcr())
    (folder / "laughs.yaml").write_text(billion_laughs_spyre())
    return {
        "folder": folder,
        "validate": _command(folder, "validate", "bomb.yaml"),
        "import-spyre": _command(folder, "import-spyre", "laughs.yaml", "-o", "out.yaml"),
    }


def test_validate_exits_2_naming_the_limit(cli_runs) -> None:
    done = cli_runs["validate"]
    assert done.returncode == 2 and done.stdout == ""
    assert "bomb.yaml:" in done.stderr and "(MAX_NODES) with aliases expanded" in done.stderr


def test_import_spyre_exits_2_and_writes_nothing(cli_runs) -> None:
    done = cli_runs["import-spyre"]
    assert done.returncode == 2
    assert "error: laughs.yaml:" in done.stderr and "(MAX_NODES)" in done.stderr
    assert not (cli_runs["folder"] / "out.yaml").exists()
