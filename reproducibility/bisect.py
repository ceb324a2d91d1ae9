"""Bisect a regression over upstream commits, between a job's last green and first red run.

`start` (web or API) checks that the two runs differ only in the PyTorch SHA
(the test suite may move with it when it is the checkout's own tree), takes
the red run's regressions as the tests to follow, and enqueues `run`.

`run` (the `run_bisection` task on the `device` queue):
1. list the commits after the green SHA up to the red one through the
   upstream resolver, oldest first; the red SHA must be the last of them;
2. the green run is the known good end, the red run the known bad end;
3. while more than one commit remains, test the midpoint: build it (with a
   build command: the combination's wheels at that commit, reused when a run or
   an earlier bisection of the same backend version built them, at most
   CRCR_BISECT_MAX_BUILDS a bisection; without one, the red run's registered
   artifacts), take the test tree at that commit (a git worktree of TORCH_ROOT),
   run the failing tests there in the build's environment with the red run's
   config and device, once each, and call the commit bad when one fails, good
   when all pass;
4. the first bad commit is the one right after the last good one.
A commit that cannot be built, or where the tests can be judged neither good
nor bad (absent, skipped), stops the bisection with a message naming the
commit and the range still open: never a guess.
"""

import logging
from pathlib import Path
from typing import Any

from crcr_reuse.launcher import PytestRun
from crcr_reuse.outcomes import FAILING, TestRecord
from django.conf import settings
from django.utils import timezone

from crcr_site.lib import enqueue, leases
from reproducibility.models import Bisection, RunRecord
from runs import artifacts, environments, planning, workfiles, worktrees
from runs.crash_pinning import Executor, ShardSpec
from runs.models import Artifact, Failure, Run, TestResult
from runs.upstream import UpstreamError, get_resolver

PASSING = tuple(TestResult.PASSING)
logger = logging.getLogger(__name__)


class BisectError(Exception):
    """A bisection that cannot start; the message says why and nothing was created."""


class Stop(Exception):
    """The bisection stops here; the message is shown as its outcome."""


def last_green_before(bad: Run) -> Run | None:
    return (
        Run.objects.filter(
            job_name=bad.job_name,
            backend=bad.backend,
            status=Run.Status.PASSED,
            created_at__lt=bad.created_at,
        )
        .order_by("-created_at")
        .first()
    )


def differences(good: Run, bad: Run) -> list[str]:
    """What moved between the runs besides the PyTorch SHA."""
    moved = []
    if good.backend_version != bad.backend_version:
        moved.append("backend version")
    if good.config_version_id != bad.config_version_id:
        moved.append("config version")
    # A checkout's test suite is the PyTorch SHA itself: it moves with it.
    suite_is_sha = good.test_suite_sha == good.pytorch_sha and bad.test_suite_sha == bad.pytorch_sha
    if good.test_suite_sha != bad.test_suite_sha and not suite_is_sha:
        moved.append("test suite")
    # A registered backend (its source) must be the same; a built backend wheel is rebuilt
    # against each PyTorch SHA, so its hash moves with it (its version is compared above).
    backend_artifacts = [
        set(run.artifacts.filter(kind="backend", file="").values_list("sha256", flat=True))
        for run in (good, bad)
    ]
    if backend_artifacts[0] != backend_artifacts[1]:
        moved.append("backend artifact")
    return moved


def regressions(bad: Run) -> list[str]:
    failures = Failure.objects.filter(run=bad, verdict=Failure.Verdict.REGRESSION)
    return sorted(set(failures.values_list("result__node_id", flat=True)))


def start(bad: Run, user: Any = None) -> Bisection:
    """Check the pair of runs and enqueue the bisection; BisectError changes nothing."""
    from reproducibility.tasks import run_bisection

    if bad.status != Run.Status.FAILED:
        raise BisectError(f"only a red run can be bisected; this one is {bad.get_status_display()}")
    good = last_green_before(bad)
    if good is None:
        raise BisectError(f"job {bad.job_name!r} has no green run before this one")
    if good.pytorch_sha == bad.pytorch_sha:
        raise BisectError("the last green run has the same PyTorch SHA: nothing upstream to bisect")
    moved = differences(good, bad)
    if moved:
        raise BisectError(
            f"the last green run differs from this one in {', '.join(moved)} as well as the "
            "PyTorch SHA: upstream commits alone cannot explain the failure"
        )
    tests = regressions(bad)
    if not tests:
        raise BisectError("this run has no regression to bisect")
    bisection = Bisection.objects.create(
        good_run=good, bad_run=bad, test_ids=tests, requested_by=user
    )
    enqueue.after_commit(run_bisection, bisection.pk)
    return bisection


def run(bisection_id: int) -> Bisection | None:
    """Run a queued bisection to its end; None when another worker has it."""
    bisection = (
        Bisection.objects.select_related("good_run", "bad_run__backend", "bad_run__config_version")
        .filter(pk=bisection_id)
        .first()
    )
    if bisection is None or not bisection.claim():
        return None
    try:
        with leases.held(bisection, Bisection.Status.RUNNING):
            first_bad = search(bisection)
    except Stop as stop:
        bisection.finish(Bisection.Status.STOPPED, str(stop))
        return bisection
    except Exception as error:  # never leave a bisection running for ever
        logger.exception("bisection %s failed", bisection.uuid)
        bisection.finish(Bisection.Status.STOPPED, f"the bisection failed: {error!r}")
        return bisection
    tested = sum(1 for step in bisection.steps if step.get("tested"))
    bisection.finish(
        Bisection.Status.FOUND,
        f"first bad commit {first_bad['sha']} ({first_bad['subject']}), found with {tested} "
        f"test step(s) over {len(bisection.commits)} commit(s)",
        first_bad_sha=first_bad["sha"],
    )
    return bisection


def give_up(bisection: Bisection, reason: str) -> None:
    """A bisection whose worker kept dying (or that was lost): stopped with the reason."""
    if Bisection.objects.filter(pk=bisection.pk, status=bisection.status).update(
        status=Bisection.Status.STOPPED, message=reason, finished_at=timezone.now()
    ):
        logger.error("bisection %s %s", bisection.uuid, reason)


def list_commits(bisection: Bisection) -> list[str]:
    good, bad = bisection.good_run.pytorch_sha, bisection.bad_run.pytorch_sha
    try:
        commits = get_resolver().commits_between(good, bad)
    except UpstreamError as error:
        raise Stop(f"the upstream resolver could not list the commits: {error}") from None
    if not commits or commits[-1] != bad:
        raise Stop(f"{bad[:12]} does not descend from {good[:12]} on the first-parent line")
    return commits


def subject(sha: str) -> str:
    try:
        return get_resolver().commit_message(sha).strip().splitlines()[0]
    except (UpstreamError, IndexError):
        return ""


def search(bisection: Bisection) -> dict[str, Any]:
    """Binary search over the commits; returns the first bad one's step."""
    bisection.commits = list_commits(bisection)
    Bisection.objects.filter(pk=bisection.pk).update(commits=bisection.commits)
    last = len(bisection.commits) - 1
    bisection.add_step(known_end(bisection.good_run, -1, "good"))
    bisection.add_step(known_end(bisection.bad_run, last, "bad"))
    lo, hi = bisection.window()
    while hi - lo > 1:
        mid = (lo + hi) // 2
        step = test_commit(bisection, mid)
        bisection.add_step(step)
        if step["verdict"] == "unknown":
            raise Stop(f"{step['detail']}; the first bad commit is one of {open_range(bisection)}")
        lo, hi = bisection.window()
    return next(s for s in bisection.steps if s["index"] == hi and s["verdict"] == "bad")


def known_end(run: Run, index: int, verdict: str) -> dict[str, Any]:
    return {
        "index": index, "sha": run.pytorch_sha, "subject": subject(run.pytorch_sha),
        "verdict": verdict, "tested": False, "outcomes": {},
        "detail": f"run {run.uuid} {run.get_status_display()}", "at": timezone.now().isoformat(),
    }  # fmt: skip


def open_range(bisection: Bisection) -> str:
    lo, hi = bisection.window()
    shas = [sha[:12] for sha in bisection.commits[lo + 1 : hi + 1]]
    return f"{len(shas)} commit(s): {', '.join(shas)}"


def tree_at(sha: str) -> Path:
    """The test tree at a commit (a git worktree of TORCH_ROOT)."""
    root = Path(settings.CRCR_TORCH_ROOT)
    if not (root / ".git").exists():
        raise Stop(
            f"commit {sha[:12]} cannot be built here: TORCH_ROOT ({root}) is not a git "
            "checkout, so there is no test tree at any other commit"
        )
    try:
        tree = worktrees.tree_for(sha)
    except worktrees.TestTreeError as error:
        raise Stop(f"commit {sha[:12]} cannot be built here: {error}") from None
    if not (tree / "test").is_dir():
        raise Stop(f"commit {sha[:12]} cannot be built here: it has no test/ folder")
    return tree


def config_text(run: Run) -> str:
    record = RunRecord.objects.filter(run=run).first()
    return record.config_text if record else run.config_version.yaml_text


def test_commit(bisection: Bisection, index: int) -> dict[str, Any]:
    """Build commits[index], run the followed tests once each there and judge the commit."""
    sha = bisection.commits[index]
    tree = tree_at(sha)
    run = bisection.bad_run
    workdir = workfiles.work_root() / "bisections" / str(bisection.uuid) / sha
    workdir.mkdir(parents=True, exist_ok=True)
    tmpdir = planning.socket_safe(workdir / "tmp", f"{bisection.uuid.hex[:8]}-{sha[:12]}")
    tmpdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "config.yaml"
    config.write_text(config_text(run))
    wheels, built_now = artifacts_at(bisection, sha, workdir)
    bisection.report(f"testing {sha[:12]}")
    try:
        with environments.prepared(wheels) as built:
            environment = planning.environment_for(run, tree, built)
            spec = ShardSpec(
                ids=bisection.test_ids, workdir=workdir,
                pytest=PytestRun(environment.with_variables(TMPDIR=str(tmpdir)),
                                 tree, configs=[config]),
                timeout=settings.CRCR_SHARD_TIMEOUT, test_timeout=settings.CRCR_TEST_TIMEOUT,
                quiet_timeout=settings.CRCR_QUIET_TIMEOUT, max_attempts=1,
            )  # fmt: skip
            records = Executor(spec, lambda record: False).run()
    except artifacts.ArtifactError as error:
        raise Stop(f"commit {sha[:12]} cannot be tested: {error}; the first bad commit is "
                   f"one of {open_range(bisection)}") from None  # fmt: skip
    verdict, detail = judge(sha, records)
    return {
        "index": index, "sha": sha, "subject": subject(sha), "verdict": verdict,
        "tested": True, "outcomes": {r.node_id: r.outcome for r in records},
        "detail": detail, "at": timezone.now().isoformat(), "built": built_now,
        "artifacts": [a.sha256 for a in wheels], "backend_version": run.backend_version,
    }  # fmt: skip


def artifacts_at(bisection: Bisection, sha: str, workdir: Path) -> tuple[list[Artifact], bool]:
    """The combination's artifacts at `sha`, and whether this step built them.

    Without a build command: the red run's own (the installed torch; only the test tree
    moves). With one: a build of that commit, reused when a run or an earlier bisection of
    the same backend version made it, else built now, at most CRCR_BISECT_MAX_BUILDS times.
    """
    run = bisection.bad_run
    if not settings.CRCR_BUILD_COMMAND:
        return list(run.artifacts.all()), False
    cached = cached_build(run, sha)
    if cached:
        return cached, False
    cap = settings.CRCR_BISECT_MAX_BUILDS
    if bisection.builds() >= cap:
        raise Stop(f"building commit {sha[:12]} would pass the cap of {cap} build(s) a "
                   f"bisection (CRCR_BISECT_MAX_BUILDS); the first bad commit is one of "
                   f"{open_range(bisection)}")  # fmt: skip
    building = f"building {sha[:12]}"
    bisection.report(building)
    try:
        wheels = artifacts.build(
            sha, run.backend, run.backend_version, log=workdir / "build.log",
            progress=lambda line: bisection.report(f"{building}: {line}" if line else building),
        )  # fmt: skip
    except artifacts.ArtifactError as error:
        raise Stop(f"commit {sha[:12]} cannot be built: {error}; the first bad commit is "
                   f"one of {open_range(bisection)}") from None  # fmt: skip
    return wheels, True


def cached_build(run: Run, sha: str) -> list[Artifact] | None:
    """Wheels built at `sha` for the run's backend version: by a run, or a bisection step."""
    for other in Run.objects.filter(
        backend=run.backend, backend_version=run.backend_version, pytorch_sha=sha
    ).prefetch_related("artifacts"):
        built = list(other.artifacts.all())
        if built and all(artifact.file for artifact in built):
            return built
    for bisection in Bisection.objects.filter(bad_run__backend=run.backend):
        for step in bisection.steps:
            hashes = step.get("artifacts") or []
            if step["sha"] == sha and step.get("backend_version") == run.backend_version:
                found = list(Artifact.objects.filter(sha256__in=hashes).exclude(file=""))
                if hashes and len(found) == len(hashes):
                    return found
    return None


def judge(sha: str, records: list[TestRecord]) -> tuple[str, str]:
    """bad when a followed test fails, good when all pass, else unknown with the reason."""
    failing = [r for r in records if r.outcome in FAILING or r.outcome in ("crashed", "timed_out")]
    absent = [r for r in failing if r.message.startswith("not collected")]
    if absent:
        return "unknown", f"at {sha[:12]} {absent[0].node_id} does not exist"
    if failing:
        return "bad", f"{len(failing)} of {len(records)} test(s) fail: {failing[0].node_id}"
    unclear = [r for r in records if r.outcome not in PASSING]
    if unclear:
        return "unknown", f"at {sha[:12]} {unclear[0].node_id} was {unclear[0].outcome}"
    return "good", f"{len(records)} test(s) pass"
