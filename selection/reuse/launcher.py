"""The one place crcr starts pytest: its interpreter, its environment, its command line.

Django-free, beside the plugin it loads, so device workers, the selection
pipeline, the reuse CLI and the repro tools share it. Every test process crcr
starts is a `PytestRun`: a shard's processes, planning's collection, the
operator capture, stage 4, the CLI's `list --collect`, re-runs and bisect
steps. The bundle's stand-alone `reproduce` script is the one exception: it
runs with the standard library alone, wherever the bundle is unpacked.

A caller:
1. describes the combination once with a `TestEnvironment` (`for_device`: the
   interpreter, and the variables that name the device, the test tree and the
   seed);
2. describes one process with a `PytestRun`: the tree, the configs, which
   tests (files, or a file of node ids) and the outputs it wants (JUnit XML,
   the reuse JSON report, the progress log, the operator capture);
3. runs it: `run()` waits and returns the output (collection), `start()`
   returns the process writing to a log, for a caller that watches it (a shard).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

# The crcr checkout (or installed tree) the plugins below are imported from.
PROJECT_ROOT = Path(__file__).resolve().parents[2]
# crcr's own settings: a test process is not crcr and must not reach its database.
CRCR_ONLY_VARIABLES = ("DJANGO_SETTINGS_MODULE", "DATABASE_URL", "CELERY_BROKER_URL")
REUSE_PLUGIN = "crcr_reuse"
PROGRESS_PLUGIN = "selection.reuse.progress_log"
CAPTURE_PLUGIN = "selection.opcapture_plugin"
# The variables `for_device` sets, which a run's metadata records.
DEVICE_VARIABLES = ("CRCR_REUSE_DEVICE", "PYTHONHASHSEED", "TORCH_ROOT")
PR_SET_PDEATHSIG = 1


@dataclass(frozen=True)
class TestEnvironment:
    """The interpreter a combination's tests run with, and their variables."""

    __test__ = False  # not a pytest test class

    python: str
    variables: Mapping[str, str]
    device_module: str | None = None

    @classmethod
    def for_device(
        cls,
        device_module: str | None,
        tree: Path,
        *,
        python: str | None = None,
        tmpdir: Path | None = None,
        extra: Mapping[str, str] | None = None,
    ) -> TestEnvironment:
        """This process's environment without crcr's settings, plus the device,
        the tree (`TORCH_ROOT`), a fixed hash seed and crcr on `PYTHONPATH`."""
        variables = dict(os.environ)
        for name in CRCR_ONLY_VARIABLES:
            variables.pop(name, None)
        variables.update(
            TORCH_ROOT=str(tree),
            PYTHONPATH=os.pathsep.join([str(PROJECT_ROOT), variables.get("PYTHONPATH", "")]),
            PYTHONHASHSEED="0",
        )
        if device_module is not None:
            variables["CRCR_REUSE_DEVICE"] = device_module
        if tmpdir is not None:
            tmpdir.mkdir(parents=True, exist_ok=True)
            variables["TMPDIR"] = str(tmpdir)  # the process's own temporary files
        variables.update(extra or {})
        return cls(python or sys.executable, variables, device_module)

    def with_variables(self, **variables: str) -> TestEnvironment:
        return replace(self, variables={**self.variables, **variables})


@dataclass(frozen=True)
class OperatorCapture:
    """Record the aten operators each test calls (selection.opcapture_plugin)."""

    out: Path
    root: Path
    keys: Path | None = None


@dataclass(frozen=True)
class PytestRun:
    """One pytest process: what it runs, with which configs, and what it writes."""

    environment: TestEnvironment
    # ${TORCH_ROOT}: where `test/` lives, and the working folder unless `cwd`;
    # None leaves the plugin to read $TORCH_ROOT itself.
    tree: Path | None
    configs: Sequence[Path] = ()
    files: Sequence[str] = ()
    ids: Path | None = None  # a file of node ids, one a line
    collect_only: bool = False
    junit: Path | None = None
    json_report: Path | None = None
    progress: Path | None = None
    capture: OperatorCapture | None = None
    test_timeout: float | None = None  # the reuse plugin's per-test limit
    rootdir: Path | None = None
    cwd: Path | None = None
    extra_args: Sequence[str] = field(default=())

    @property
    def uses_reuse(self) -> bool:
        return bool(self.configs) or self.environment.device_module is not None

    def reuse_args(self) -> list[str]:
        """The reuse plugin's options: the configs, the device, the tree, the test limit."""
        if not self.uses_reuse:
            return []
        args = ["-p", REUSE_PLUGIN, *(f"--reuse-config={config}" for config in self.configs)]
        if self.environment.device_module is not None:
            args.append(f"--reuse-device={self.environment.device_module}")
        if self.tree is not None:
            args.append(f"--reuse-torch-root={self.tree}")
        if self.test_timeout is not None:
            args.append(f"--reuse-timeout={self.test_timeout:g}")
        return args

    def argv(self) -> list[str]:
        command = [self.environment.python, "-m", "pytest", *self.files]
        if self.ids is not None:
            # The reuse plugin reads a shard's ids itself (and generates only
            # those); without it pytest reads them as arguments from the file.
            command.append(f"--reuse-ids={self.ids}" if self.uses_reuse else f"@{self.ids}")
        command += ["--collect-only"] if self.collect_only else []
        command += ["-p", "no:cacheprovider", "-q"]
        command += [] if self.collect_only else ["--no-header", "-rN"]
        command += [f"--rootdir={self.rootdir}"] if self.rootdir else []
        if self.progress is not None:
            command += ["-p", PROGRESS_PLUGIN, f"--crcr-progress={self.progress}"]
        if self.capture is not None:
            command += ["-p", CAPTURE_PLUGIN, f"--opcapture-out={self.capture.out}"]
            command.append(f"--opcapture-root={self.capture.root}")
            if self.capture.keys is not None:
                command.append(f"--opcapture-keys={self.capture.keys}")
        command += [f"--junitxml={self.junit}"] if self.junit else []
        command += self.reuse_args()
        command += [f"--reuse-json={self.json_report}"] if self.json_report else []
        return [*command, *self.extra_args]

    @property
    def working_dir(self) -> Path:
        folder = self.cwd or self.tree
        if folder is None:
            raise ValueError("a pytest run needs a test tree or a working folder")
        return folder

    def run(self, timeout: float) -> subprocess.CompletedProcess[str]:
        """Run to the end and return its output (raises TimeoutExpired past `timeout`)."""
        return subprocess.run(
            self.argv(),
            cwd=self.working_dir,
            env=dict(self.environment.variables),
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def start(self, log: Path) -> subprocess.Popen[bytes]:
        """Start it writing to `log`, in its own process group (a kill takes every
        child) and killed when the starting process dies."""
        with log.open("wb") as output:
            return subprocess.Popen(
                self.argv(),
                cwd=self.working_dir,
                env=dict(self.environment.variables),
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent,
            )


def kill(process: subprocess.Popen[bytes]) -> None:
    """Kill a started process with its whole group and reap it."""
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def _die_with_parent() -> None:
    """In the child: be killed when the worker that started it dies (Linux)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
