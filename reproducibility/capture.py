"""Capture what every run is made of, without anyone asking (DESIGN §5).

Three listeners of `runs.events` (connected in `ReproducibilityConfig.ready`):
1. `record_run_start(run, pytest)` when the run's shards are planned: the
   trigger (raw payload, PR, SHA, action), the artifacts with versions and
   SHA-256, the config version and its text, the shard plan, seeds, the pytest
   command, the test tree and crcr's own commit, frozen into a RunRecord;
2. `record_worker(run, shard, environment)` on the device worker that claims a
   shard: the host's environment (reproducibility.environment) and the
   variables the shard's pytest processes get, one WorkerEnvironment per claim;
3. `record_run_end(run)` once the run finished: make sure the record exists
   (a run that never planned still gets one) and enqueue its bundle.

reproducibility.metadata assembles all of it, with every test attempt, into
the one JSON document the bundle, the API and the page show.
"""

import importlib.metadata
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from crcr_reuse.launcher import DEVICE_VARIABLES, PytestRun, TestEnvironment
from django.conf import settings

from reproducibility import environment as host
from reproducibility.models import Bundle, RunRecord, WorkerEnvironment
from runs import environments, planning, workfiles, worktrees
from runs.models import Artifact, Run, Shard, Trigger

FORMAT = "crcr-run-metadata/1"
# PyTorch's TestCase seeds every test with common_utils.SEED unless pytest gets
# --seed; crcr never passes one.
TORCH_TEST_SEED = 1234
# pip freeze costs a second or two: a worker measures its host once per window.
HOST_FACTS_SECONDS = 600
BUNDLED_TREE = Path(settings.BASE_DIR) / "tests" / "upstream"
_host_cache: dict[str, tuple[float, dict[str, Any]]] = {}


def record_run_start(run: Run, pytest: PytestRun | None = None, **_event: object) -> RunRecord:
    """Freeze the run's trigger, artifacts, config, plan, seeds and command (idempotent)."""
    record, _ = RunRecord.objects.update_or_create(run=run, defaults=record_fields(run, pytest))
    return record


def record_fields(run: Run, pytest: PytestRun | None = None) -> dict[str, Any]:
    """What a RunRecord holds for this run, read from the database and this host now;
    `pytest` is the run's process as planning made it (else made again the same way)."""
    run = Run.objects.select_related("trigger__dispatch", "config_version", "backend").get(
        pk=run.pk
    )
    tree = tree_facts(run)
    if pytest is None:
        # Only the command's shape is recorded (the config as config.yaml): no file written.
        path = Path(tree["path"])
        pytest = PytestRun(planning.environment_for(run, path), path)
    env = pytest.environment.variables
    return {
        "trigger": trigger_facts(run.trigger),
        "artifacts": [artifact_facts(a) for a in run.artifacts.order_by("kind", "name")],
        "config_number": run.config_version.number,
        "config_sha256": run.config_version.sha256,
        "config_text": run.config_version.yaml_text,
        "plan": plan_facts(run),
        "seeds": {"PYTHONHASHSEED": env.get("PYTHONHASHSEED", ""), "torch_test": TORCH_TEST_SEED},
        "command": command_facts(pytest),
        "test_tree": tree,
        "crcr": crcr_facts(),
    }


def record_worker(
    run: Run,
    shard: Shard,
    environment: TestEnvironment | None = None,
    built: environments.Environment | None = None,
    **_event: object,
) -> WorkerEnvironment:
    """Record this host's environment for a shard it claimed (once per claim);
    `environment` is what the shard's processes get (else made again the same way),
    `built` the interpreter they run in (else this worker's own)."""
    facts = host_facts(run.backend.device_module)
    built = built or environments.installed()
    if not built.installed:
        # The tests' packages are the combination's environment's, not the worker's.
        versions = {wheel["kind"]: wheel["version"] for wheel in built.wheels}
        facts.update(
            python_version=built.facts.get("python_version", facts["python_version"]),
            torch_version=versions.get("pytorch", ""),
            backend_version=versions.get("backend", ""),
            pip_freeze=built.freeze,
        )
    facts["environment"] = built.describe()
    if environment is None:
        environment = planning.environment_for(run, Path(tree_facts(run)["path"]), built)
    env = environment.variables
    names = (*host.RELEVANT_ENV_VARS, *DEVICE_VARIABLES)
    facts["env_vars"] = {name: env[name] for name in names if name in env}
    row, _ = WorkerEnvironment.objects.get_or_create(
        shard=shard, shard_attempt=shard.attempts, defaults={"run": run, **facts}
    )
    # The shard's HUD job reports these versions (runs.relay.outbox), from this claim.
    hud = row.hud_environment(run.backend.device_module)
    Shard.objects.filter(pk=shard.pk).update(environment=hud)
    return row


def record_run_end(run: Run, **_event: object) -> Bundle:
    """Once the run finished: make sure it has a record, and enqueue its bundle."""
    from reproducibility import bundles

    if not RunRecord.objects.filter(run=run).exists():
        record_run_start(run)
    return bundles.request(run)


def host_facts(device_module: str) -> dict[str, Any]:
    """environment.capture() for the backend's distribution, cached for a while."""
    top = device_module.split(".")[0]
    cached = _host_cache.get(top)
    if cached is None or time.monotonic() - cached[0] > HOST_FACTS_SECONDS:
        # Which distribution installs the package: read on a miss only (it reads every
        # installed package's metadata, about 0.5 s a shard when it was read each time).
        found = importlib.metadata.packages_distributions().get(top, [])
        cached = (time.monotonic(), host.capture(next(iter(found), "")))
        _host_cache[top] = cached
    return dict(cached[1])


def trigger_facts(trigger: Trigger) -> dict[str, Any]:
    dispatch = trigger.dispatch
    facts: dict[str, Any] = {
        "kind": trigger.kind,
        "ref": trigger.ref,
        "pytorch_sha": trigger.pytorch_sha,
        "requested_by": trigger.requested_by.get_username() if trigger.requested_by else "",
        "created_at": trigger.created_at.isoformat(),
        "pr_number": dispatch.pr_number if dispatch else None,
        "action": dispatch.action if dispatch else "",
        "dispatch": None,
    }
    if dispatch is not None:
        facts["dispatch"] = {
            "delivery_id": dispatch.delivery_id,
            "source": dispatch.source,
            "event_type": dispatch.event_type,
            "base_ref": dispatch.base_ref,
            "head_sha": dispatch.head_sha,
            "verdict": dispatch.verdict,
            "verdict_reason": dispatch.verdict_reason,
            "received_at": dispatch.received_at.isoformat(),
            "raw_body": dispatch.raw_body,
        }
    return facts


def artifact_facts(artifact: Artifact) -> dict[str, Any]:
    return {
        "kind": artifact.kind,
        "name": artifact.name,
        "version": artifact.version,
        "sha256": artifact.sha256,
        "size": artifact.size,
        "location": artifact.location,
        "stored_as": artifact.file.name if artifact.file else "",
    }


def plan_facts(run: Run) -> list[dict[str, Any]]:
    return [
        {"index": s.index, "test_ids": s.test_ids, "estimated_seconds": s.estimated_seconds}
        for s in run.shards.order_by("index")
    ]


def tree_facts(run: Run) -> dict[str, Any]:
    """Which test tree the run used: crcr's bundled one, a checkout at the SHA, or a folder."""
    root = Path(settings.CRCR_TORCH_ROOT)
    if (root / ".git").exists():
        worktree = workfiles.work_root() / worktrees.WORKTREES / run.pytorch_sha
        return {"kind": "checkout", "repository": str(root), "sha": run.pytorch_sha,
                "path": str(worktree)}  # fmt: skip
    # crcr's own small tree travels in the bundle; another folder is only referenced.
    kind = "bundled" if root.resolve() == BUNDLED_TREE.resolve() else "folder"
    return {"kind": kind, "path": str(root), "fingerprint": run.test_suite_sha}


def command_facts(pytest: PytestRun) -> dict[str, Any]:
    """The shape of every pytest process of the run, as runs.crash_pinning starts it."""
    tree = str(pytest.tree)
    shape = replace(
        pytest, configs=[Path("config.yaml")], ids=Path("<ids>"), progress=Path("<log>"),
        junit=Path("<xml>"),
    )  # fmt: skip
    env = pytest.environment.variables
    return {
        "python": " ".join(["python", *shape.argv()[1:]]).replace(tree, "${TORCH_ROOT}"),
        "plugin_args": [arg.replace(tree, "${TORCH_ROOT}") for arg in shape.reuse_args()],
        "cwd": "${TORCH_ROOT}",
        "env": {name: env[name] for name in DEVICE_VARIABLES if name in env},
        "shard_timeout": settings.CRCR_SHARD_TIMEOUT,
        "test_timeout": settings.CRCR_TEST_TIMEOUT,
        "max_attempts": 3,
    }


def _git(*args: str) -> str:
    try:
        completed = subprocess.run(
            ["git", "-C", str(settings.BASE_DIR), *args],
            capture_output=True, text=True, timeout=30, check=False,
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return completed.stdout.strip() if completed.returncode == 0 else ""


def crcr_facts() -> dict[str, Any]:
    """crcr's own version, commit and checkout: the reuse plugin comes from there."""
    try:
        version = importlib.metadata.version("crcr")
    except importlib.metadata.PackageNotFoundError:
        version = ""
    return {
        "version": version,
        "commit": _git("rev-parse", "HEAD"),
        "dirty": bool(_git("status", "--porcelain", "--untracked-files=no")),
        "checkout": str(settings.BASE_DIR),
    }
