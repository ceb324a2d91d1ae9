"""Stage 4: run the proposed tests on the device and correct the proposals from what happened.

Running goes through the normal shard machinery: the proposals become a config
(`configwriter.standalone`), pytest collects it with the reuse plugin, and
`runs.crash_pinning.Executor` runs the ids (crash pinning, hang watchdog, one retry
of failures that are not deterministic, all of them in one fresh process). The results are grouped per generic
test (the `crcr_test` property) and each proposal is corrected:
- every variant passed: confirmed; a pass of an `xfail` (XPASS, strict or not)
  promotes it to `mandatory_success`; a pass only on retry makes it flaky;
- failures, classified by `runs.triage`: a `numerical_mismatch` small enough => a
  tolerance edit; where only some OpInfos (modules) fail, whatever the failure, drop those
  and keep the test required for the rest; otherwise `unsupported_op` => skip naming the
  op; `unsupported_dtype` => drop those dtypes; crash / timeout => skip; anything else
  (a larger mismatch included) => xfail.
Flaky tests are quarantined (non-strict xfail) with their history as evidence:
this run plus the backend's recent CI runs.
"""

from __future__ import annotations

import contextlib
import math
import re
import threading
from collections import defaultdict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from crcr_reuse.launcher import PytestRun, TestEnvironment, collected_ids
from crcr_reuse.outcomes import TestRecord

from runs.crash_pinning import Executor, ShardSpec
from runs.excerpts import clip, clip_start
from runs.triage import classify, error_line
from selection.capabilities import Capabilities, device_variables, ops_text
from selection.opindex import exclusion_kind

Key = tuple[str, str, str]
Progress = Callable[[str, int, int], None]
PASSING = ("passed", "xpassed")
FAILING = ("failed", "error", "crashed", "timed_out", "xpassed_strict")
DEVICE_SUFFIX = re.compile(r"(PRIVATEUSE1|PRIVATEUSEONE)$")
UNSUPPORTED = {"unsupported_op", "unsupported_dtype"}
NO_RETRY = UNSUPPORTED | {"test_error", "crash", "timeout"}
TEST_TIMEOUT = 60.0
# A numerical mismatch this small becomes a tolerance edit rather than an xfail.
TOLERABLE = 1e-3


class DeviceRunError(Exception):
    """Collection on the device failed (a broken config or tree); the message says how."""


@dataclass
class Observed:
    """What the device run showed for one generic test."""

    variants: int = 0
    passed: int = 0
    failures: list[dict[str, Any]] = field(default_factory=list)
    xpassed: int = 0
    flaky: list[str] = field(default_factory=list)
    opinfos: set[str] = field(default_factory=set)  # its OpInfos, or a `@modules` test's modules
    dtypes: set[str] = field(default_factory=set)

    def as_dict(self) -> dict[str, Any]:
        return {
            "variants": self.variants,
            "passed": self.passed,
            "xpassed": self.xpassed,
            "failed": len(self.failures),
            "flaky": self.flaky[:10],
            "failures": self.failures[:5],
        }


def run_on_device(
    tree: Path,
    config_text: str,
    device_module: str,
    capabilities: Capabilities,
    workdir: Path,
    progress: Progress | None = None,
) -> list[TestRecord]:
    """Collect the config's tests on the device and run them; every attempt of every test."""
    pytest = device_pytest(tree, config_text, device_module, capabilities, workdir)
    ids, records = collect(pytest)
    return records + run_ids(pytest, ids, workdir / "shard", progress) if ids else records


def device_pytest(
    tree: Path, config_text: str, device_module: str, capabilities: Capabilities, workdir: Path
) -> PytestRun:
    """The pytest process that runs the config's tests on the device (its files in `workdir`)."""
    workdir.mkdir(parents=True, exist_ok=True)
    config = workdir / "config.yaml"
    config.write_text(config_text)
    environment = TestEnvironment.for_device(
        device_module, tree, extra=device_variables(capabilities, workdir)
    )
    return PytestRun(environment, tree, configs=[config], test_timeout=TEST_TIMEOUT / 2)


def collect(pytest: PytestRun) -> tuple[list[str], list[TestRecord]]:
    """The node ids the config selects on the device, and an error record per file that
    does not even import there."""
    completed = replace(pytest, collect_only=True).run(timeout=1800)
    ids = collected_ids(completed.stdout)
    broken = collection_errors(completed.stdout)
    if completed.returncode not in (0, 5) and not (ids or broken):
        tail = (completed.stdout + completed.stderr)[-3000:]
        raise DeviceRunError(
            f"collection on the device failed (exit {completed.returncode}):\n{tail}"
        )
    records = [
        TestRecord(path, "error", message=f"the file does not import on the device: {why}")
        for path, why in broken.items()
    ]
    return ids, records


def run_ids(
    pytest: PytestRun, ids: list[str], workdir: Path, progress: Progress | None = None
) -> list[TestRecord]:
    """Run the ids (crash pinning, hang watchdog, one retry of a failure that may pass).
    The retries share one process: on real files hundreds of variants fail the same way
    (a numerical mismatch, an assertion) and a process start costs ~10 s."""
    spec = ShardSpec(
        ids=ids,
        workdir=workdir,
        pytest=pytest,
        timeout=3600,
        test_timeout=TEST_TIMEOUT,
        max_attempts=2,
        retry_together=True,
    )
    with _Watcher(spec.workdir, len(ids), progress):
        return Executor(spec, should_retry).run()


def collection_errors(output: str) -> dict[str, str]:
    """Files pytest could not collect, with the error's last line."""
    errors: dict[str, str] = {}
    for block in re.split(r"_{3,} ERROR collecting ", output)[1:]:
        path = block.split(" ", 1)[0].strip()
        lines = [
            line.removeprefix("E").strip() for line in block.splitlines() if line.startswith("E ")
        ]
        errors[path] = clip(lines[-1], 300) if lines else "collection error"
    return errors


def should_retry(record: TestRecord) -> bool:
    return classify(record.message).category not in NO_RETRY


class _Watcher(threading.Thread):
    """Reports how many tests finished, from the executor's progress logs."""

    def __init__(self, folder: Path, total: int, progress: Progress | None) -> None:
        super().__init__(daemon=True)
        self.folder, self.total, self.progress = folder, total, progress
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(2.0):
            self.report()

    def report(self) -> None:
        if self.progress is None:
            return
        finished: set[str] = set()
        for log in self.folder.glob("*.progress.jsonl"):
            for line in log.read_text(errors="replace").splitlines():
                if '"event": "finish"' in line:
                    match = re.search(r'"node_id": "([^"]+)"', line)
                    if match:
                        finished.add(match.group(1))
        self.progress(
            "stage 4: running the proposed tests on the device",
            min(len(finished), self.total),
            self.total,
        )

    def __enter__(self) -> _Watcher:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stopped.set()
        self.join()
        self.report()


# -- reading the results -----------------------------------------------------------------------


def generic_key(record: TestRecord, tree: Path, known: Sequence[Key] = ()) -> Key:
    """The generic test a record belongs to: from its `crcr_test` property, or (a crashed
    test reports no properties) the known generic test its node id was generated from."""
    props = {str(p[0]): str(p[1]) for p in record.properties if len(p) == 2}
    parts = props.get("crcr_test", "").split("::")
    if len(parts) == 3:
        path = parts[0]
        with contextlib.suppress(ValueError):  # a path outside the tree stays as it is
            path = str(Path(path).resolve().relative_to(tree.resolve()))
        return (path, parts[1], parts[2])
    file, _, rest = record.node_id.partition("::")
    cls, _, name = rest.rpartition("::")
    generic_cls = DEVICE_SUFFIX.sub("", cls)
    candidates = [
        key
        for key in known
        if key[0] == file
        and key[1] in (cls, generic_cls)
        and (name == key[2] or name.startswith(key[2] + "_"))
    ]
    if candidates:
        return max(candidates, key=lambda key: len(key[2]))
    return (file, cls, name)


def observe(
    records: Sequence[TestRecord], tree: Path, known: Sequence[Key] = ()
) -> dict[Key, Observed]:
    """Per generic test: variants, final outcomes, failures with their classification."""
    attempts: dict[str, list[TestRecord]] = defaultdict(list)
    for record in records:
        attempts[record.node_id].append(record)
    observed: dict[Key, Observed] = defaultdict(Observed)
    for node_id, tries in attempts.items():
        if "::" not in node_id:  # a whole file failed to import
            for key in known:
                if key[0] == node_id:
                    observed[key].variants += 1
                    observed[key].failures.append(_import_failure(tries[-1]))
            continue
        tries.sort(key=lambda r: r.attempt)
        final = tries[-1]
        seen = observed[generic_key(final, tree, known)]
        props = {str(p[0]): str(p[1]) for p in final.properties if len(p) == 2}
        seen.variants += 1
        # The variant: its OpInfo, or in a `@modules` test its module (both as configs name them).
        variant = props.get("op") or props.get("module", "")
        if variant:
            seen.opinfos.add(variant)
        if props.get("dtype"):
            seen.dtypes.add(props["dtype"])
        if final.outcome in PASSING or final.outcome == "xfailed":
            seen.passed += final.outcome == "passed"
            seen.xpassed += final.outcome == "xpassed"
            if tries[0].outcome in FAILING and final.outcome in PASSING:
                seen.flaky.append(node_id)
        elif final.outcome in FAILING:
            found = classify(final.message)
            seen.failures.append(
                {
                    "node_id": node_id,
                    "outcome": final.outcome,
                    "category": str(found.category),
                    "op": found.op_overload or found.op or "",
                    # The variant's dtype, which an edit can drop; the message may name
                    # another (a float16 test computing in ComplexHalf).
                    "dtype": props.get("dtype", "") or found.dtype,
                    "opinfo": variant,
                    "line": clip(found.line or error_line(final.message), 300),
                    "message": clip_start(final.message, 600),
                }
            )
    return dict(observed)


def _import_failure(record: TestRecord) -> dict[str, Any]:
    return {
        "node_id": record.node_id, "outcome": "error", "category": "test_error", "op": "",
        "dtype": "", "opinfo": "", "line": clip(error_line(record.message), 300),
        "message": clip_start(record.message, 600),
    }  # fmt: skip


# -- correcting -------------------------------------------------------------------------------


@dataclass
class Correction:
    mode: str
    reason: str
    edits: dict[str, Any] = field(default_factory=dict)
    flaky: bool = False


def correct(
    mode: str,
    edits: dict[str, Any],
    seen: Observed,
    cpu_failed: bool = False,
    device_generic: bool = True,
) -> Correction | None:
    """The corrected proposal, or None when the device run confirms it. `cpu_failed` and
    `device_generic`: a plain test (it runs on the host CPU either way) that failed under
    capture and passes here gave two outcomes for the same code: it is flaky."""
    xfailish = mode in ("xfail", "xfail_strict")
    if xfailish and cpu_failed and not device_generic and not seen.failures and seen.xpassed:
        return Correction(
            "xfail",
            "flaky: it failed in the capture run and passed on the device, running the same CPU code",
            flaky=True,
        )
    if seen.flaky:
        return Correction(
            "xfail",
            f"flaky on the device: {len(seen.flaky)} variant(s) failed, then passed on a retry",
            flaky=True,
        )
    if not seen.failures:
        if xfailish and seen.xpassed:
            return Correction(
                "mandatory_success",
                f"passed on the device ({seen.xpassed} unexpected "
                f"pass{'' if seen.xpassed == 1 else 'es'}) though proposed {mode}",
                edits,
            )
        return None
    if xfailish and all(f["outcome"] == "xpassed_strict" for f in seen.failures):
        return Correction("mandatory_success", "a strict xfail passed on the device (XPASS)", edits)
    return _from_failures(mode, edits, seen)


def _from_failures(mode: str, edits: dict[str, Any], seen: Observed) -> Correction:
    failures = seen.failures
    categories = {f["category"] for f in failures}
    first = failures[0]
    if all(f["line"].startswith("the file does not import") for f in failures):
        return Correction("skip", first["line"][:300])
    bad_opinfos = {f["opinfo"] for f in failures if f["opinfo"]}
    partial_opinfos = (
        bad_opinfos and len(bad_opinfos) < len(seen.opinfos) and all(f["opinfo"] for f in failures)
    )
    # Small mismatches get a tolerance; otherwise, where only some OpInfos (modules) fail,
    # drop those and keep the test required for the others, rather than xfail or skip
    # every variant of it (one OpInfo's error message can fail an `@ops` test of 138).
    if categories == {"numerical_mismatch"} and (tolerated := _tolerance(edits, failures)):
        return tolerated
    if partial_opinfos:
        return _drop_variants(edits, failures, bad_opinfos)
    bad_dtypes = {f["dtype"] for f in failures if f["dtype"]}
    if categories <= UNSUPPORTED and bad_dtypes and len(bad_dtypes) < len(seen.dtypes):
        return Correction(
            "mandatory_success",
            f"drops dtype {', '.join(sorted(bad_dtypes))}: the device fails it "
            f"({first['line'][:120]})",
            _merge_exclude(edits, "dtypes", sorted(bad_dtypes)),
        )
    if "unsupported_op" in categories:
        ops = sorted({f["op"] for f in failures if f["category"] == "unsupported_op" and f["op"]})
        return Correction(
            "skip",
            f"on the device it needs {ops_text(ops) or 'an operator'}, which is not supported",
        )
    if "crash" in categories or any(f["outcome"] == "crashed" for f in failures):
        return Correction("skip", f"crashes the test process on the device: {first['line'][:160]}")
    if "timeout" in categories or any(f["outcome"] == "timed_out" for f in failures):
        return Correction("skip", "hangs on the device (stopped by the per-test time limit)")
    if categories == {"numerical_mismatch"}:
        worst = _worst(failures)[0]
        shown = "unknown" if worst == float("inf") else f"{worst:.3g}"
        return Correction(
            "xfail", f"numerical mismatch on the device (greatest absolute difference {shown})"
        )
    return Correction("xfail", f"fails on the device: {first['line'][:200]}")


def _drop_variants(
    edits: dict[str, Any], failures: list[dict[str, Any]], bad: set[str]
) -> Correction:
    """Keep the test required without the OpInfos (modules) that failed on the device."""
    kind, what = exclusion_kind(bad)
    unsupported = [f for f in failures if f["category"] in UNSUPPORTED]
    others = [f for f in failures if f["category"] not in UNSUPPORTED]
    if unsupported:
        ops = sorted(
            {f["op"] for f in unsupported if f["category"] == "unsupported_op" and f["op"]}
        )
        why = f"on the device {ops_text(ops) or 'an operator'} is not supported"
        if others:
            why += f"; {len(others)} more fail otherwise ({others[0]['line'][:100]})"
    else:
        why = f"{'it fails' if len(bad) == 1 else 'they fail'} on the device ({others[0]['line'][:160]})"
    return Correction(
        "mandatory_success",
        f"drops {what} {', '.join(sorted(bad))}: {why}",
        _merge_exclude(edits, kind, sorted(bad)),
    )


def _tolerance(edits: dict[str, Any], failures: list[dict[str, Any]]) -> Correction | None:
    """A tolerance edit for mismatches small enough (each dtype's, doubled), else None."""
    worst_abs, worst_rel = _worst(failures)
    dtypes = sorted({f["dtype"] for f in failures if f["dtype"] and "," not in f["dtype"]})
    if worst_abs > TOLERABLE or not dtypes:
        return None
    precision = {"atol": _round_up(worst_abs * 2), "rtol": _round_up(max(worst_rel * 2, 1e-6))}
    include = [{"name": d, "precision": precision} for d in dtypes]
    merged = dict(edits)
    merged["dtypes"] = dict(merged.get("dtypes", {})) | {"include": include}
    return Correction(
        "mandatory_success",
        f"a small numerical mismatch on the device (greatest absolute difference {worst_abs:.2g}): "
        f"tolerance raised for {', '.join(dtypes)}",
        merged,
    )


def _worst(failures: list[dict[str, Any]]) -> tuple[float, float]:
    """The greatest absolute and relative differences the mismatches report (inf: unknown)."""
    worst_abs, worst_rel = 0.0, 0.0
    for failure in failures:
        found_abs = re.search(
            r"Greatest absolute difference: ([0-9.eE+\-]+|nan|inf)", failure["message"]
        )
        found_rel = re.search(
            r"Greatest relative difference: ([0-9.eE+\-]+|nan|inf)", failure["message"]
        )
        if not found_abs:
            return float("inf"), worst_rel
        worst_abs = max(worst_abs, float(found_abs.group(1)))
        worst_rel = max(worst_rel, float(found_rel.group(1)) if found_rel else 0.0)
    return worst_abs, worst_rel


def _round_up(value: float) -> float:
    """A tolerance just above `value`, on two significant digits."""
    if value <= 0:
        return 1e-6
    step = 10 ** (math.floor(math.log10(value)) - 1)
    return float(f"{math.ceil(value / step) * step:.2g}")


def _merge_exclude(edits: dict[str, Any], kind: str, names: list[str]) -> dict[str, Any]:
    merged = {k: dict(v) for k, v in edits.items()}
    current = [item["name"] for item in merged.get(kind, {}).get("exclude", [])]
    merged.setdefault(kind, {})["exclude"] = [
        {"name": name} for name in dict.fromkeys(current + names)
    ]
    return merged


# -- flaky history ------------------------------------------------------------------------------


def flaky_history(
    backend_id: int, keys: set[Key], runs: int = 10
) -> dict[Key, list[dict[str, Any]]]:
    """Per test, the backend's recent CI runs in which it failed and then passed on a retry."""
    from runs.models import Run, TestResult

    recent = list(
        Run.objects.filter(backend_id=backend_id)
        .order_by("-created_at")
        .values_list("pk", flat=True)[:runs]
    )
    query = TestResult.objects.filter(run_id__in=recent)
    if len(keys) <= 1000:  # a few tests (a run's flaky ones): only theirs are read
        query = query.filter(test_name__in={key[2] for key in keys})
    rows = query.order_by("attempt").values_list(
        "run__uuid", "run__created_at", "file_path", "class_name", "test_name", "node_id", "outcome"
    )
    outcomes: dict[tuple[Key, Any, str], list[str]] = defaultdict(list)
    when: dict[Any, Any] = {}
    for run_uuid, created, path, cls, name, node_id, outcome in rows.iterator(chunk_size=5000):
        key = (path, cls, name)
        if key in keys:
            outcomes[(key, run_uuid, node_id)].append(outcome)
            when[run_uuid] = created
    history: dict[Key, dict[Any, dict[str, Any]]] = defaultdict(dict)
    for (key, run_uuid, node_id), sequence in outcomes.items():
        if sequence[0] in FAILING and sequence[-1] in PASSING:
            history[key][run_uuid] = {
                "run": str(run_uuid),
                "at": when[run_uuid].isoformat(),
                "node_id": node_id,
            }
    return {key: list(runs_seen.values()) for key, runs_seen in history.items()}
