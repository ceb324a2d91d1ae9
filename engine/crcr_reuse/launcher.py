"""The one place crcr starts pytest: its interpreter, its environment, its command line.

Django-free, beside the plugin it loads, so device workers, the selection
pipeline, the reuse CLI and the repro tools share it. Every test process crcr
starts is a `PytestRun`: a shard's processes, planning's collection, the
operator capture, stage 4, the CLI's `list --collect`, re-runs and bisect
steps. The bundle's stand-alone `reproduce` script is the one exception: it
runs with the standard library alone, wherever the bundle is unpacked.

A caller:
1. describes the combination once with a `TestEnvironment` (`for_device`: the
   interpreter, the worker's variables a test needs, an allow-list that keeps
   secrets and crcr's settings out, and those that name the device, the test tree
   and the seed);
2. describes one process with a `PytestRun`: the tree, the configs, which
   tests (files, or a file of node ids) and the outputs it wants (JUnit XML,
   the reuse JSON report, the progress log, the operator capture);
3. runs it: `run()` waits and returns the output (collection), `start()`
   returns the process writing to a log, for a caller that watches it (a shard),
   `call()` runs it in the foreground, its output the caller's (the supervisor).
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import importlib.metadata
import os
import re
import signal
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cache
from pathlib import Path

# The folder the engine is imported from. A source checkout (it holds the engine's
# pyproject.toml) goes on a test process's PYTHONPATH, so an interpreter without the
# engine installed (a combination's own environment) finds the plugins; an installed
# engine's site-packages never does (it would shadow that environment's own torch).
ENGINE_ROOT = Path(__file__).resolve().parents[1]
ENGINE_FROM_SOURCE = (ENGINE_ROOT / "pyproject.toml").is_file()
# What a test process gets of the worker's environment (an allow-list): the system's
# basics, the interpreter's switches, CI (torch's test harness reads it), torch's, the
# accelerator runtimes' and the math libraries' variables, and the device's own
# (`device_prefixes`). Anything else (cloud keys, tokens, proxies, crcr's settings)
# stays with the worker unless an operator names it in CRCR_TEST_ENV_PASSTHROUGH.
PASSED_VARIABLES = frozenset(
    {"PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "TZ", "TMPDIR", "LD_LIBRARY_PATH", "CI",
     "XDG_CACHE_HOME", "PYTHONPATH", "PYTHONHOME", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE",
     "PYTHONWARNINGS", "PYTHONFAULTHANDLER", "PYTHONIOENCODING", "PYTHONUTF8", "PYTHONMALLOC",
     "PYTHONDEVMODE", "PYTHONNOUSERSITE"}
)  # fmt: skip
PASSED_PREFIXES = (
    "LC_", "TORCH", "PYTORCH_", "CUDA_", "CUBLAS_", "CUDNN_", "NCCL_", "NVIDIA_", "HIP_", "HSA_",
    "ROCM_", "TRITON_", "OMP_", "MKL_", "KMP_",
)  # fmt: skip
# Comma-separated names, or NAME* prefixes, an operator lets through as well.
PASSTHROUGH_VARIABLE = "CRCR_TEST_ENV_PASSTHROUGH"
# Never passed, whatever a list says: crcr's own settings (a test process is not crcr
# and must not reach its database or broker).
CRCR_ONLY_VARIABLES = ("DATABASE_URL", "DJANGO_*", "CELERY_*")
# A name with one of these looks like a secret: no prefix lets it through, only its
# own name in the operator's list.
SECRET_WORDS = ("TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "_KEY", "APIKEY")
# Devices whose variables are not named after their package: the bundled reference device.
NAMED_DEVICE_PREFIXES = {"crcr_reuse.reference_device": "CRCR_REFDEV_"}
REUSE_PLUGIN = "crcr_reuse"
# The same plugin by module, for an interpreter without crcr installed (a combination's
# own environment: the engine's checkout is on its PYTHONPATH, its entry point is not).
REUSE_PLUGIN_MODULE = "crcr_reuse.plugin"
PROGRESS_PLUGIN = "crcr_reuse.progress_log"
CAPTURE_PLUGIN = "crcr_reuse.opcapture"
# The variables `for_device` sets, which a run's metadata records.
DEVICE_VARIABLES = ("CRCR_REUSE_DEVICE", "PYTHONHASHSEED", "TORCH_ROOT")
PR_SET_PDEATHSIG = 1
# The signal on which a test process with the progress log writes its threads' stacks
# (`crcr_reuse.progress_log.STACKS_SIGNAL`; not imported: that module imports pytest).
STACKS_SIGNAL = signal.SIGUSR1
_PASSTHROUGH_ENTRY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\*?")


@dataclass(frozen=True)
class TestEnvironment:
    """The interpreter a combination's tests run with, and their variables."""

    __test__ = False  # not a pytest test class

    python: str
    variables: Mapping[str, str]
    device_module: str | None = None
    reuse_plugin: str = REUSE_PLUGIN  # the `-p` name that loads the reuse plugin there

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
        """The variables of this process a test needs (`passed_variables`), plus the
        device, the tree (`TORCH_ROOT`), a fixed hash seed and the engine's source
        checkout on `PYTHONPATH`;
        `python` is the combination's own interpreter (default: this one)."""
        variables = passed_variables(os.environ, device_module)
        variables.update(
            TORCH_ROOT=str(tree),
            PYTHONHASHSEED="0",
        )
        if ENGINE_FROM_SOURCE:
            paths = [str(ENGINE_ROOT), variables.get("PYTHONPATH", "")]
            variables["PYTHONPATH"] = os.pathsep.join(paths)
        if device_module is not None:
            variables["CRCR_REUSE_DEVICE"] = device_module
        if tmpdir is not None:
            tmpdir.mkdir(parents=True, exist_ok=True)
            variables["TMPDIR"] = str(tmpdir)  # the process's own temporary files
        variables.update(extra or {})
        python = python or sys.executable
        return cls(python, variables, device_module, reuse_plugin_for(python))

    def with_variables(self, **variables: str) -> TestEnvironment:
        return replace(self, variables={**self.variables, **variables})


def reuse_plugin_for(python: str) -> str:
    """How `python` loads the reuse plugin: by its entry point where crcr is installed,
    else by module from the engine's checkout on PYTHONPATH. The checkout may carry an editable
    install's metadata naming the entry point, and then it must be loaded by that name
    (pytest refuses a plugin registered twice)."""
    if python == sys.executable:
        return REUSE_PLUGIN
    return REUSE_PLUGIN if _checkout_names_the_entry_point() else REUSE_PLUGIN_MODULE


@cache
def _checkout_names_the_entry_point() -> bool:
    """Read once a process: every test process spec asks, the checkout does not change."""
    in_checkout = importlib.metadata.distributions(path=[str(ENGINE_ROOT)])
    return any(
        entry.group == "pytest11" and entry.name == REUSE_PLUGIN
        for dist in in_checkout
        for entry in dist.entry_points
    )


def passed_variables(environ: Mapping[str, str], device_module: str | None) -> dict[str, str]:
    """The variables of `environ` a test process gets.

    1. the allow-list: `PASSED_VARIABLES`, `PASSED_PREFIXES` and the device's own prefixes;
    2. the operator's CRCR_TEST_ENV_PASSTHROUGH: names, and NAME* prefixes;
    3. a secret-looking name passes only when the operator's list names it exactly;
       crcr's own settings never pass.
    """
    names, prefixes = passthrough(environ.get(PASSTHROUGH_VARIABLE, ""))
    prefixes += (*PASSED_PREFIXES, *device_prefixes(device_module))
    passed = {}
    for name, value in environ.items():
        if _matches(name, CRCR_ONLY_VARIABLES):
            continue
        if name in names or (
            (name in PASSED_VARIABLES or name.startswith(prefixes))
            and not any(word in name.upper() for word in SECRET_WORDS)
        ):
            passed[name] = value
    return passed


def passthrough(spec: str) -> tuple[frozenset[str], tuple[str, ...]]:
    """CRCR_TEST_ENV_PASSTHROUGH as (names, prefixes); a bad entry raises ValueError."""
    entries = [entry.strip() for entry in spec.split(",") if entry.strip()]
    bad = [entry for entry in entries if not _PASSTHROUGH_ENTRY.fullmatch(entry)]
    if bad:
        raise ValueError(
            f"{PASSTHROUGH_VARIABLE}: {', '.join(map(repr, bad))} is not a variable name "
            "or a NAME* prefix (comma-separated)"
        )
    names = frozenset(entry for entry in entries if not entry.endswith("*"))
    return names, tuple(entry[:-1] for entry in entries if entry.endswith("*"))


def device_prefixes(device_module: str | None) -> tuple[str, ...]:
    """The device's own variables: named after its top-level package (`torch_npu` ->
    TORCH_NPU_*), or CRCR_REFDEV_* for the bundled reference device."""
    if not device_module:
        return ()
    for module, prefix in NAMED_DEVICE_PREFIXES.items():
        if device_module == module or device_module.startswith(f"{module}."):
            return (prefix,)
    return (device_module.split(".")[0].upper() + "_",)


def _matches(name: str, patterns: Sequence[str]) -> bool:
    return any(
        name.startswith(pattern[:-1]) if pattern.endswith("*") else name == pattern
        for pattern in patterns
    )


@dataclass(frozen=True)
class OperatorCapture:
    """Record the aten operators each test calls (crcr_reuse.opcapture)."""

    out: Path
    root: Path
    keys: Path | None = None
    # With `keys`: the generic tests the source lists; a test none of them names (added
    # to its class at import) runs as well.
    known: Path | None = None
    resume: bool = False  # leave out the tests `out` already holds a line for


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
    # pytest's assertion rewriting parses and compiles every test module it imports:
    # a collection that only lists ids turns it off (a seventh of collecting a big tree).
    rewrite_asserts: bool = True
    junit: Path | None = None
    json_report: Path | None = None
    progress: Path | None = None
    resume: bool = False  # deselect the tests the progress log has an outcome for
    capture: OperatorCapture | None = None
    test_timeout: float | None = None  # the reuse plugin's per-test limit
    # The device's health probe between tests (`health_probe.py`) and its schedule.
    health_probe: str | None = None
    health_every: int | None = None
    labels: Sequence[str] = ()  # the reuse plugin's label selection (--reuse-labels)
    rootdir: Path | None = None
    cwd: Path | None = None
    extra_args: Sequence[str] = field(default=())
    # crcr reads the reports, not the output: quiet, no header, no short summary.
    # False leaves the output to the user's own options (the supervisor).
    terse: bool = True

    @property
    def uses_reuse(self) -> bool:
        return bool(self.configs) or self.environment.device_module is not None

    def reuse_args(self) -> list[str]:
        """The reuse plugin's options: the configs, the device, the tree, the test limit,
        the labels, the health probe."""
        if not self.uses_reuse:
            return []
        args = [
            "-p",
            self.environment.reuse_plugin,
            *(f"--reuse-config={config}" for config in self.configs),
        ]
        if self.environment.device_module is not None:
            args.append(f"--reuse-device={self.environment.device_module}")
        if self.tree is not None:
            args.append(f"--reuse-torch-root={self.tree}")
        if self.test_timeout is not None:
            args.append(f"--reuse-timeout={self.test_timeout:g}")
        if self.labels:
            args.append(f"--reuse-labels={','.join(self.labels)}")
        if self.health_probe:
            args.append(f"--reuse-health-probe={self.health_probe}")
        if self.health_every is not None:
            args.append(f"--reuse-health-every={self.health_every}")
        return args

    def argv(self) -> list[str]:
        command = [self.environment.python, "-m", "pytest", *self.files]
        if self.ids is not None:
            # The reuse plugin reads a shard's ids itself (and generates only
            # those); without it pytest reads them as arguments from the file.
            command.append(f"--reuse-ids={self.ids}" if self.uses_reuse else f"@{self.ids}")
        command += ["--collect-only"] if self.collect_only else []
        command += [] if self.rewrite_asserts else ["--assert=plain"]
        # No cache: --lf/--ff would select and order tests differently in each process.
        command += ["-p", "no:cacheprovider"]
        command += ["-q"] if self.terse else []
        command += [] if self.collect_only or not self.terse else ["--no-header", "-rN"]
        command += [f"--rootdir={self.rootdir}"] if self.rootdir else []
        if self.progress is not None:
            command += ["-p", PROGRESS_PLUGIN, f"--crcr-progress={self.progress}"]
            command += ["--crcr-progress-resume"] if self.resume else []
        if self.capture is not None:
            command += ["-p", CAPTURE_PLUGIN, f"--opcapture-out={self.capture.out}"]
            command.append(f"--opcapture-root={self.capture.root}")
            if self.capture.keys is not None:
                command.append(f"--opcapture-keys={self.capture.keys}")
            if self.capture.known is not None:
                command.append(f"--opcapture-known={self.capture.known}")
            if self.capture.resume:
                command.append("--opcapture-resume")
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

    def call(self) -> int:
        """Run in the foreground, its output this process's, and return its exit status
        (negative: the signal that ended it)."""
        process = subprocess.Popen(
            self.argv(),
            cwd=self.working_dir,
            env=dict(self.environment.variables),
            preexec_fn=die_with_parent,
        )
        try:
            return process.wait()
        except KeyboardInterrupt:
            # Same process group: pytest got the Ctrl-C too and ends its own way (status 2).
            return process.wait()

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
                preexec_fn=die_with_parent,
            )


def collected_ids(stdout: str) -> list[str]:
    """The node ids a `-q --collect-only` run listed, whatever characters they hold.

    pytest lists one id a line, then a blank line (or, with nothing listed, a rule)
    before its summary sections, whose warnings repeat ids and quote code: the ids
    are the lines up to there that name a test (`path::name`); anything a plugin
    printed before the listing is passed over."""
    ids: list[str] = []
    for line in stdout.splitlines():
        if line.startswith(("=", "_")) or (ids and not line.strip()):
            break
        if "::" in line and not line[:1].isspace():
            ids.append(line)
    return ids


def kill(process: subprocess.Popen[bytes]) -> None:
    """Kill a started process with its whole group and reap it."""
    # The group may be gone already (the process ended and had no children left).
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def kill_with_stacks(process: subprocess.Popen[bytes], grace: float = 2.0) -> None:
    """Kill a stuck process with its group, first asking it for every thread's Python
    stack (SIGUSR1: the progress log plugin has faulthandler write them to the process's
    output, even while it is stuck in C code) and giving it `grace` seconds to write them."""
    with contextlib.suppress(ProcessLookupError, subprocess.TimeoutExpired):
        os.kill(process.pid, STACKS_SIGNAL)
        process.wait(timeout=grace)
    kill(process)


def die_with_parent() -> None:
    """In the child: be killed when the worker that started it dies (Linux)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
