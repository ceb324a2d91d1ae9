"""pytest entry point ``crcr_reuse``: run PyTorch's own tests shaped by a reuse config.

Loaded in every pytest run of the project (entry point), so it stays inert
unless ``--reuse-config`` or ``--reuse-device`` is given: it only registers its
options and imports neither torch nor the rest of this package.

    pytest -p crcr_reuse --reuse-config cfg.yaml [--reuse-config more.yaml] \\
        [--reuse-device MODULE] [--reuse-ids shard.txt] [--reuse-json report.json] \\
        [--reuse-timeout SECONDS] [--reuse-labels smoke,core] [--junitxml junit.xml] [-n 2] \\
        [--reuse-health-probe python:MODULE:FUNCTION|command:PROGRAM] [--reuse-health-every N]
"""

from __future__ import annotations

from typing import Any

import pytest

SESSION_PLUGIN = "crcr_reuse_session"
PROBE_PLUGIN = "crcr_reuse_health_probe"


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
    group.addoption(
        "--reuse-health-probe",
        metavar="SPEC",
        help="device health probe run between tests: python:MODULE:FUNCTION or "
        "command:PROGRAM [ARGS] (default: $CRCR_REUSE_HEALTH_PROBE); when it fails the "
        "session stops with exit status 70",
    )
    group.addoption(
        "--reuse-health-every",
        type=int,
        default=20,
        metavar="N",
        help="also probe every N tests (0: only before the first test and after failures)",
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
    if not session.controller:  # an xdist controller runs no test: its workers probe
        _watch_health(early_config, namespace)
    if not namespace.file_or_dir:
        # No paths given: collect what the config (or the shard's id list) names.
        args.extend(session.default_paths())


def _watch_health(config: pytest.Config, namespace: Any) -> None:
    """Register the health probe's watch when a probe is set; a bad setting stops the
    session before any test (a usage error naming it)."""
    import os

    from .health_probe import ENV_PROBE, HealthProbe, ProbeError, ProbeWatch

    spec = namespace.reuse_health_probe or os.environ.get(ENV_PROBE, "")
    if not spec.strip():
        return
    if namespace.reuse_health_every < 0:
        raise pytest.UsageError("crcr reuse: --reuse-health-every must be 0 or more")
    try:
        watch = ProbeWatch(HealthProbe.parse(spec), namespace.reuse_health_every)
    except ProbeError as error:
        raise pytest.UsageError(f"crcr reuse: {error}") from None
    config.pluginmanager.register(watch, PROBE_PLUGIN)
