"""The plugin is loaded in every pytest run of the project: without its options it does nothing."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from .conftest import ROOT, clean_env


def test_importing_the_plugin_does_not_import_torch() -> None:
    code = "import sys, crcr_reuse.plugin; print('torch' in sys.modules)"
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, env=clean_env(), capture_output=True, text=True
    )
    assert done.stdout.strip() == "False", done.stderr


def test_a_pytest_run_without_reuse_options_is_untouched(tmp_path: Path) -> None:
    (tmp_path / "test_plain.py").write_text(
        "import sys\n\ndef test_torch_stays_unloaded():\n    assert 'torch' not in sys.modules\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:django", "-p", "no:cacheprovider", "-q",
         f"--rootdir={tmp_path}", str(tmp_path)],
        cwd=tmp_path, env=clean_env(), capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:]
    assert "1 passed" in done.stdout and "crcr reuse" not in done.stdout


def test_the_plugin_registers_its_options() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:django", "--help"],
        cwd=ROOT, env=clean_env(), capture_output=True, text=True, check=False,
    )  # fmt: skip
    for option in ("--reuse-config=YAML", "--reuse-device=MODULE", "--reuse-ids=FILE",
                   "--reuse-json=FILE", "--reuse-timeout=SECONDS"):  # fmt: skip
        assert option in done.stdout
