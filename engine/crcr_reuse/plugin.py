"""pytest entry point ``crcr_reuse``: run PyTorch's own tests shaped by a reuse config.

Loaded in every pytest run of the project (entry point), so it stays inert
unless ``--reuse-config`` or ``--reuse-device`` is given: it only registers its
options and imports neither torch nor the rest of this package.

    pytest -p crcr_reuse --reuse-config cfg.yaml [--reuse-config more.yaml] \\
        [--reuse-device MODULE] [--reuse-ids shard.txt] [--reuse-json report.json] \\
        [--reuse-timeout SECONDS] [--reuse-labels smoke,core] [--junitxml junit.xml] [-n 2]
"""

from __future__ import annotations

from typing import Any

import pytest

SESSION_PLUGIN = "crcr_reuse_session"


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("crcr-reuse", "crcr: reuse PyTorch's tests on a privateuse1 device")
    group.addoption(
        "--reuse-config",
        action="append",
        default=[],
        metavar="YAML",
        help="test config (repeat to merge several); collects the files it lists",
    )
    group.addoption(
        "--reuse-device",
        metavar="MODULE",
        help="module whose import registers the privateuse1 backend "
        "(default: $CRCR_REUSE_DEVICE, else crcr_reuse.reference_device)",
    )
    group.addoption(
        "--reuse-ids", metavar="FILE", help="run only these test ids (one node id a line)"
    )
    group.addoption("--reuse-json", metavar="FILE", help="write the JSON report here")
    group.addoption(
        "--reuse-torch-root", metavar="DIR", help="value of ${TORCH_ROOT} (default: $TORCH_ROOT)"
    )
    group.addoption(
        "--reuse-device-root",
        metavar="DIR",
        help="value of ${TORCH_DEVICE_ROOT} (default: $TORCH_DEVICE_ROOT)",
    )
    group.addoption(
        "--reuse-labels",
        action="append",
        default=[],
        metavar="LABELS",
        help="run only the tests these labels select (comma-separated, as Torch Spyre's "
        "TEST_TYPE): full (all), suite_<group> (configs in folder <group>), or a label of "
        "the configs' labels; the rest are deselected and counted",
    )
    group.addoption(
        "--reuse-timeout",
        type=float,
        metavar="SECONDS",
        help="per-test time limit (a hang fails the test)",
    )


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(
    early_config: pytest.Config, parser: pytest.Parser, args: Any
) -> None:
    """Before any conftest or test file imports torch.testing: validate, register the device."""
    namespace = early_config.known_args_namespace
    if not (namespace.reuse_config or namespace.reuse_device):
        return
    if early_config.pluginmanager.get_plugin(SESSION_PLUGIN) is not None:
        return
    from .session import ReuseSession

    session = ReuseSession.start(namespace)
    early_config.pluginmanager.register(session, SESSION_PLUGIN)
    if not namespace.file_or_dir:
        # No paths given: collect what the config (or the shard's id list) names.
        args.extend(session.default_paths())
