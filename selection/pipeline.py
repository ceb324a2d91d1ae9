"""The selection pipeline for one backend: inventory, stages 1-4, proposals in the review queue.

`run_for_backend()` is the main job (the demo and `manage.py select` call it):
1. inventory the tree at the SHA (repo memory, incremental);
2. stage 1: choose the files to analyse from the backend's extension points and
   scope preference (exclusions keep their reasons in the run's summary);
3. operator index: run the chosen files under the capture (CPU);
4. stage 3: classify every test (deterministic by default, see `classifiers`);
5. stage 4: run the proposed set on the device and correct it (`refine`);
   flaky tests with a history get a quarantine proposal;
6. store proposals: one pending proposal per test whose decision the config
   does not already say; a decision already approved or merged is not re-proposed.
"""

from __future__ import annotations

import hashlib
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from django.conf import settings

from runs.models import Backend
from selection import configwriter, inventory, opindex, proposers, refine, scope
from selection.capabilities import Capabilities, for_backend, ops_text
from selection.models import (
    CapturedTest,
    ConfigVersion,
    InventorySnapshot,
    Proposal,
    SelectionRun,
    UpstreamTest,
)
from selection.progress import Progress, RunStatus, both
from selection.proposals import save_proposals

Key = tuple[str, str, str]


@dataclass
class Decision:
    key: Key
    mode: str
    reason: str
    stage: str
    edits: dict[str, Any] = field(default_factory=dict)
    evidence: dict[str, Any] = field(default_factory=dict)

    def for_config(self) -> configwriter.Decision:
        return configwriter.Decision(
            *self.key, mode=self.mode, reason=self.reason, edits=self.edits
        )


# -- inputs -------------------------------------------------------------------------------------


def default_tree() -> Path:
    return Path(settings.CRCR_TORCH_ROOT).resolve()


def tree_sha(tree: Path) -> str:
    """A stand-in SHA for a tree that is not a git checkout: a hash of its test files."""
    digest = hashlib.sha256()
    for path in inventory.test_files(tree):
        digest.update(str(path).encode() + b"\0" + (tree / path).read_bytes())
    return "bundled-" + digest.hexdigest()[:32]


def current_config(backend: Backend) -> str:
    version = ConfigVersion.objects.filter(backend=backend).order_by("-number").first()
    return version.yaml_text if version else "test_suite_config:\n  files: []\n"


def evidence_for(snapshot: InventorySnapshot, keys: Iterable[Key]) -> dict[Key, proposers.Evidence]:
    """Everything stage 3 needs per test: the inventory row, the capture, the op index.

    A test the capture saw that the source scan cannot (a method a file adds to its class
    with `setattr` when imported, as test_torch.py's `add_neg_dim_tests` does) stands on
    its capture alone, device-generic as its class's other tests are."""
    wanted = set(keys)
    files = {key[0] for key in wanted}
    tests = UpstreamTest.objects.filter(
        file__snapshot=snapshot, file__path__in=files
    ).select_related("file")
    captured = {
        (c.file_path, c.class_name, c.test_name): c
        for c in CapturedTest.objects.filter(file_path__in=files)
    }
    ops = opindex.ops_of(wanted)
    out: dict[Key, proposers.Evidence] = {}
    generic_classes: dict[tuple[str, str], bool] = {}
    for test in tests:
        key = test.key
        generic_classes[key[:2]] = test.device_generic
        if key in wanted:
            out[key] = _evidence(key, captured.get(key), ops, test)
    for key in sorted(wanted - out.keys()):
        if key in captured:
            out[key] = _evidence(key, captured[key], ops, generic=generic_classes.get(key[:2]))
    return out


def _evidence(
    key: Key,
    seen: CapturedTest | None,
    ops: dict[Key, dict[str, dict[str, bool]]],
    test: UpstreamTest | None = None,
    generic: bool | None = None,
) -> proposers.Evidence:
    """One test's evidence from its inventory row (if the source has it) and its capture."""
    return proposers.Evidence(
        key=key,
        device_generic=test.device_generic if test else generic is not False,
        restrictions=list(test.device_restrictions) if test else [],
        summary=test.summary if test else "added to its class when the file is imported",
        captured=seen is not None and not seen.uncaptured,
        variants=seen.variants if seen else 0,
        passed=seen.passed if seen else 0,
        failed=seen.failed if seen else 0,
        skipped=seen.skipped if seen else 0,
        first_failure=seen.first_failure if seen else "",
        opinfos=list(seen.opinfos) if seen else list(test.ops) if test else [],
        dtypes=list(seen.dtypes) if seen and seen.dtypes else list(test.dtypes) if test else [],
        modules=list(seen.modules) if seen else list(test.modules) if test else [],
        ops=ops.get(key, {}),
    )


# -- stages ---------------------------------------------------------------------------------------


def stage1(snapshot: InventorySnapshot, backend: Backend) -> scope.CoarseResult:
    files = [
        scope.FileInfo(path, summary, bytes(blob) if blob else None)
        for path, summary, blob in snapshot.files.values_list("path", "summary", "embedding")
    ]
    keys = [
        t.key for t in UpstreamTest.objects.filter(file__snapshot=snapshot).select_related("file")
    ]
    meaning: dict[str, dict[str, float]] = {}
    subjects = [c.subject for c in scope.clauses(backend.scope_preference) if c.subject]
    if subjects and any(f.embedding for f in files):
        from selection import embeddings

        for subject, vector in zip(subjects, embeddings.encode(subjects), strict=True):
            scores = embeddings.similarities(vector, [f.embedding for f in files])
            meaning[subject] = {f.path: score for f, score in zip(files, scores, strict=True)}
    return scope.coarse_filter(
        files, backend.extension_points, backend.scope_preference, keys, meaning
    )


def stage3(
    evidence: dict[Key, proposers.Evidence],
    capabilities: Capabilities,
    classifier: proposers.Classifier | None = None,
    progress: Progress | None = None,
) -> dict[Key, Decision]:
    chosen = classifier or proposers.configured_classifier()
    fallback = proposers.EvidenceClassifier()
    decisions: dict[Key, Decision] = {}
    for n, (key, item) in enumerate(sorted(evidence.items()), start=1):
        try:
            verdict = chosen.classify(item, capabilities)
        except proposers.ClassifierError as error:
            verdict = fallback.classify(item, capabilities)
            verdict.evidence["rejected_answer"] = f"{chosen.name}: {error}"
        decisions[key] = Decision(
            key,
            verdict.mode,
            verdict.reason,
            Proposal.Stage.CLASSIFY,
            verdict.edits,
            verdict.evidence,
        )
        if progress and (n % 50 == 0 or n == len(evidence)):
            progress("stage 3: classifying tests", n, len(evidence))
    return decisions


def stage4(
    decisions: dict[Key, Decision],
    backend: Backend,
    tree: Path,
    capabilities: Capabilities,
    parent: str,
    progress: Progress | None = None,
    workdir: Path | None = None,
) -> dict[str, Any]:
    """Run the non-skipped decisions, and the skips worth a try, on the device; correct
    them in place (`device_config`, then `correct`: the chunked path calls the same two)."""
    text = device_config(decisions, parent)
    if text is None:
        return {"ran": 0}
    with tempfile.TemporaryDirectory(prefix="crcr-stage4-") as scratch:
        folder = workdir or Path(scratch)
        records = refine.run_on_device(
            tree, text, backend.device_module, capabilities, folder, progress
        )
    return correct(decisions, records, tree, backend)


def device_config(decisions: dict[Key, Decision], parent: str) -> str | None:
    """The config stage 4 runs: every decision but the skips, and the skips worth a try
    (their only reason an operator their set-up or checks call, `proposers.TRY_ON_DEVICE`:
    such a helper may never reach the device) as `mandatory_success`. None: nothing to run."""
    tried = _tried(decisions)
    runnable = [
        replace(d.for_config(), mode="mandatory_success") if d.key in tried else d.for_config()
        for d in decisions.values()
        if d.mode != "skip" or d.key in tried
    ]
    return configwriter.standalone(parent, runnable) if runnable else None


def correct(
    decisions: dict[Key, Decision], records: Sequence[Any], tree: Path, backend: Backend
) -> dict[str, Any]:
    """Correct the decisions in place from the device's records; flaky ones with a
    history in the backend's CI runs are quarantined."""
    tried = _tried(decisions)
    observed = refine.observe(records, tree, list(decisions))
    history = refine.flaky_history(backend.pk, set(decisions), settings.CRCR_QUARANTINE_WINDOW)
    corrected = 0
    for key, decision in decisions.items():
        seen = observed.get(key)
        if seen is None:
            continue
        decision.evidence["device"] = seen.as_dict()
        if key in tried:
            corrected += _after_a_try(decision, seen)
            continue
        capture = decision.evidence.get("capture", {})
        fix = refine.correct(
            decision.mode,
            decision.edits,
            seen,
            cpu_failed=bool(capture.get("failed")),
            device_generic=decision.evidence.get("device_generic", True),
        )
        if fix is None:
            continue
        corrected += 1
        decision.mode, decision.reason, decision.edits = fix.mode, fix.reason, fix.edits
        decision.stage = Proposal.Stage.REFINE
        if fix.flaky and history.get(key):
            runs = history[key]
            decision.stage = Proposal.Stage.QUARANTINE
            decision.reason = f"flaky: failed then passed on a retry in this run and in {len(runs)} recent CI run(s)"
            decision.evidence["flaky_history"] = runs
    for key, runs in history.items():
        held = decisions.get(key)
        often = len(runs) >= settings.CRCR_QUARANTINE_FLAKY_RUNS
        if held is not None and often and held.stage != Proposal.Stage.QUARANTINE:
            held.mode, held.edits = "xfail", {}
            held.stage = Proposal.Stage.QUARANTINE
            held.reason = f"flaky in {len(runs)} of the recent CI runs: quarantined"
            held.evidence["flaky_history"] = runs
    return {"ran": len(records), "tests": len(observed), "corrected": corrected}


def _tried(decisions: dict[Key, Decision]) -> set[Key]:
    return {k for k, d in decisions.items() if d.mode == "skip" and _worth_a_try(d)}


def _worth_a_try(decision: Decision) -> bool:
    return decision.stage == Proposal.Stage.CLASSIFY and bool(
        decision.evidence.get(proposers.TRY_ON_DEVICE)
    )


def _after_a_try(decision: Decision, seen: refine.Observed) -> int:
    """A tried skip that passed on the device runs there; one that failed stays skipped."""
    if seen.failures or seen.flaky or not seen.passed:
        return 0
    helpers = ops_text(decision.evidence.get("unsupported_ops", []))
    decision.mode, decision.stage = "mandatory_success", Proposal.Stage.REFINE
    decision.reason = (
        f"passed on the device ({seen.passed} variants): {helpers} in its set-up or checks "
        "never reached the device"
    )
    return 1


# -- the main job --------------------------------------------------------------------------------


class Laps:
    """Wall time per stage: `lap(stage)` closes the stage that ran since the last call."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.clock = time.monotonic()

    def __call__(self, stage: str) -> None:
        now = time.monotonic()
        self.seconds[stage] = round(now - self.clock, 2)
        self.clock = now


def start_run(backend: Backend, kind: str, argument: str = "", user: Any = None) -> SelectionRun:
    return SelectionRun.objects.create(
        backend=backend, kind=kind, argument=argument, requested_by=user
    )


def run_for_backend(
    backend: Backend,
    tree_root: Path | str | None = None,
    pytorch_sha: str | None = None,
    progress: Progress | None = None,
    run: SelectionRun | None = None,
    classifier: proposers.Classifier | None = None,
    device: bool = True,
) -> SelectionRun:
    """Inventory the tree, run stages 1-4 for the backend, leave proposals in the review queue."""
    run = run or start_run(backend, SelectionRun.Kind.SELECT)
    if run.status == SelectionRun.Status.QUEUED and not run.claim():
        return run
    report = both(progress, RunStatus(run))
    try:
        with run.held():
            summary = _select(backend, run, tree_root, pytorch_sha, report, classifier, device)
    except Exception as error:
        run.finish({}, error=f"{type(error).__name__}: {error}")
        raise
    run.finish(summary)
    return run


@dataclass
class Prepared:
    """What stages 1 and 3 start from: the tree, its SHA, its inventory, stage 1's choice."""

    tree: Path
    sha: str
    snapshot: InventorySnapshot
    coarse: scope.CoarseResult


def prepare(
    backend: Backend,
    run: SelectionRun,
    tree_root: Path | str | None,
    pytorch_sha: str | None,
    report: Progress,
    lap: Callable[[str], None] = lambda stage: None,
) -> Prepared:
    """Inventory the tree at the SHA, then stage 1; `lap(stage)` as each ends."""
    tree = Path(tree_root).resolve() if tree_root else default_tree()
    if tree_root is None and pytorch_sha and (tree / ".git").exists():
        from runs import worktrees

        tree = worktrees.tree_for(pytorch_sha)  # TORCH_ROOT is a clone: the SHA's worktree
    sha = pytorch_sha or tree_sha(tree)
    SelectionRun.objects.filter(pk=run.pk).update(pytorch_sha=sha)
    snapshot = inventory.scan(tree, sha, report)
    lap("inventory")
    report("stage 1: choosing files", 0, 1)
    coarse = stage1(snapshot, backend)
    lap("stage 1")
    return Prepared(tree, sha, snapshot, coarse)


def classify(
    backend: Backend,
    prepared: Prepared,
    report: Progress,
    classifier: proposers.Classifier | None = None,
) -> tuple[str, Capabilities, dict[Key, Decision]]:
    """Stage 3 over the chosen files (the index holds their capture): the parent config,
    the device's capabilities and a decision per test, stage 1's exclusions included."""
    coarse = prepared.coarse
    parent = current_config(backend)
    report("stage 3: probing the device's operators", 0, 1)
    capabilities = for_backend(parent, backend.device_module)
    included = set(coarse.included)
    keys = [k for k in prepared.snapshot.test_hashes() if k[0] in included]
    keys += sorted(opindex.captured_keys(included) - set(keys))  # added at import time
    evidence = evidence_for(prepared.snapshot, [k for k in keys if k not in coarse.excluded_tests])
    decisions = stage3(evidence, capabilities, classifier, report)
    for key, reason in coarse.excluded_tests.items():
        decisions[key] = Decision(
            key, "skip", reason, Proposal.Stage.COARSE, evidence={"stage1": reason}
        )
    return parent, capabilities, decisions


def _select(
    backend: Backend,
    run: SelectionRun,
    tree_root: Path | str | None,
    pytorch_sha: str | None,
    report: Progress,
    classifier: proposers.Classifier | None,
    device: bool,
) -> dict[str, Any]:
    lap = Laps()
    timings = lap.seconds
    prepared = prepare(backend, run, tree_root, pytorch_sha, report, lap)
    tree = prepared.tree
    capture = opindex.capture(tree, prepared.coarse.included, progress=report)
    lap("operator index")
    parent, capabilities, decisions = classify(backend, prepared, report, classifier)
    lap("stage 3")
    device_summary = (
        stage4(decisions, backend, tree, capabilities, parent, report) if device else {}
    )
    lap("stage 4")
    report("saving proposals", 0, 1)
    counts = save_proposals(backend, run, decisions.values(), parent)
    report("done", 1, 1)
    said = capabilities.summary()
    return summary(prepared, capture, said, device_summary, counts, decisions, timings)


def summary(
    prepared: Prepared,
    capture: opindex.CaptureResult,
    capabilities: dict[str, Any],
    device_summary: dict[str, Any],
    counts: dict[str, int],
    decisions: dict[Key, Decision],
    timings: dict[str, float],
) -> dict[str, Any]:
    """What a finished selection run says (its page and the benches read it)."""
    return {
        "pytorch_sha": prepared.sha,
        "tree": str(prepared.tree),
        "inventory": prepared.snapshot.stats,
        "stage1": prepared.coarse.as_dict(),
        "capture": {"tests": capture.tests, "variants": capture.variants, "rows": capture.rows,
                    "processes": capture.processes, "lost_files": capture.lost_files},
        "capabilities": capabilities,
        "stage4": device_summary,
        "proposals": counts,
        "decisions": decisions_summary(decisions.values()),
        "seconds": timings,
    }  # fmt: skip


def decisions_summary(decisions: Iterable[Decision]) -> list[dict[str, Any]]:
    return [
        {
            "test": "::".join(d.key),
            "mode": d.mode,
            "edits": d.edits,
            "stage": d.stage,
            "reason": d.reason,
        }
        for d in sorted(decisions, key=lambda d: d.key)
    ]


def config_decisions(summary: Iterable[dict[str, Any]]) -> list[configwriter.Decision]:
    """A summary's decisions (`decisions_summary`'s form) as the config writes them."""
    decisions = []
    for d in summary:
        path, cls, name = d["test"].split("::")
        decisions.append(configwriter.Decision(path, cls, name, d["mode"], d["reason"], d["edits"]))
    return decisions


def keys_in(paths: Sequence[str], snapshot: InventorySnapshot) -> list[Key]:
    wanted = set(paths)
    return [key for key in snapshot.test_hashes() if key[0] in wanted]
