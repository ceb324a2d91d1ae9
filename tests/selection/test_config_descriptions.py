"""Descriptions through a config's whole life: loaded with their positions, shown by
`explain`, written back by `merge` and kept byte for byte by the config writer."""

import difflib
from pathlib import Path

import pytest
from crcr_reuse.cli import config_document, main
from crcr_reuse.loader import load_configs

from selection.configwriter import Decision, apply
from tests.engine.conftest import TREE
from tests.engine.test_descriptions import DESCRIBED, VARIANTS, descriptions

TOKENS = {"TORCH_ROOT": str(TREE)}
# The engine test's config (a description on an item of every kind), as a backend's
# config is written: paths under ${TORCH_ROOT}.
CONFIG = DESCRIBED.replace(str(TREE), "${TORCH_ROOT}")


@pytest.fixture
def config_path(tmp_path: Path) -> Path:
    path = tmp_path / "crcr-config.yaml"
    path.write_text(CONFIG)
    return path


def description_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if "description:" in line]


def test_every_description_is_shown_merged_back_and_kept_by_a_config_pr_elsewhere(
    config_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    loaded = load_configs([config_path], TOKENS)
    kept = descriptions(loaded)
    assert len(kept) == CONFIG.count("description:") == 14
    explained = ""
    for test_id in VARIANTS:
        assert (
            main(["explain", test_id, "--config", str(config_path), "--torch-root", str(TREE)]) == 0
        )
        explained += capsys.readouterr().out
    shown = [d for _, d in kept if d.text in explained]
    assert f"{len(shown)} of {len(kept)}" == "14 of 14"

    assert main(["merge", str(config_path), "--torch-root", str(TREE)]) == 0
    merged = tmp_path / "merged.yaml"
    merged.write_text(capsys.readouterr().out)
    again = load_configs([merged], TOKENS)
    assert [(w, d.text) for w, d in descriptions(again)] == [(w, d.text) for w, d in kept]
    assert config_document(again) == config_document(loaded)

    # A config PR deciding a test of another file: only lines are added, every description
    # line of the parent stays, byte for byte and in order.
    written = apply(
        CONFIG,
        [Decision("test/test_plain_reuse.py", "TestPlainMath", "test_sum", "xfail", "off by one")],
    )
    removed = [line for line in difflib.ndiff(CONFIG.splitlines(), written.splitlines())
               if line.startswith("- ")]  # fmt: skip
    assert removed == []
    assert description_lines(written) == description_lines(CONFIG)
    path = tmp_path / "written.yaml"
    path.write_text(written)
    assert len(descriptions(load_configs([path], TOKENS))) == 14


def test_a_rewritten_entry_keeps_its_description_key_and_its_items_descriptions(
    tmp_path: Path,
) -> None:
    decision = Decision(
        "test/test_ops_reuse.py", "TestOpsReuse", "test_matches_cpu", "xfail",
        "mismatch of 0.25 in add's float32 variant",
        {"ops": {"exclude": [{"name": "lgamma"}, {"name": "hypot"}]}},
    )  # fmt: skip
    written = apply(CONFIG, [decision])
    assert (
        "        - names: [TestOpsReuse::test_matches_cpu]\n"
        "          mode: xfail\n"
        '          description: "mismatch of 0.25 in add\'s float32 variant"\n'
        '          edits: {ops: {exclude: [{name: lgamma, description: "no lgamma kernel yet."}, '
        "{name: hypot}]}}\n"
    ) in written
    path = tmp_path / "written.yaml"
    path.write_text(written)
    kept = dict((w, d.text) for w, d in descriptions(load_configs([path], TOKENS)))
    assert (
        kept["tests TestOpsReuse::test_matches_cpu"] == "mismatch of 0.25 in add's float32 variant"
    )
    assert kept["edits.ops.exclude lgamma"] == "no lgamma kernel yet."
    # The other entries' and the global section's descriptions are untouched.
    assert kept["global.supported_ops mul"] == "mul is native."
    assert kept["edits.modules.exclude torch.nn.ReLU"] == "ReLU's backward is missing."
