"""The operator index: run tests under the operator capture and store op -> tests, test -> ops.

Steps of `capture()`:
1. group the chosen files by content (`same_text`): files with the same bytes under
   the same conftest.py files (renamed copies) run the same tests the same way, so
   only the first of each group runs and stands for the others;
2. run pytest with `crcr_reuse.opcapture` over those files of the tree, in as
   few processes as possible (each pays ~10 s importing torch's test machinery), on
   the CPU by default (every op has a kernel there, so a test's whole op list shows)
   or on the backend's device; a process that dies is followed by one process per
   remaining file so one crash loses one file;
3. fold the per-variant lines into one `CapturedTest` per generic test (variants,
   outcomes, the OpInfos/dtypes/modules it spans) and `OpUsage` rows keyed by
   (test, OpInfo variant, op), "under test" or "helper"; each file of a group gets
   its own rows, the same as the file that ran;
4. replace what the index held for those tests: re-running updates, never duplicates.
"""

from __future__ import annotations

import hashlib
import subprocess
import tempfile
from collections import defaultdict
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from itertools import islice
from pathlib import Path
from typing import Any

from crcr_reuse.launcher import OperatorCapture, PytestRun, TestEnvironment
from crcr_reuse.opcapture import read_lines, written_ids
from django.db import connection, transaction
from django.db.models import Q

from selection.models import CapturedTest, OpUsage

Key = tuple[str, str, str]
Progress = Callable[[str, int, int], None]
TEST_TIMEOUT = 120.0
# Keys per DELETE: SQLite refuses an expression nested 1,000 deep (a chain of ORs).
STALE_CHUNK = 200


@dataclass
class CaptureResult:
    tests: int = 0
    variants: int = 0
    rows: int = 0
    processes: int = 0
    lost_files: list[str] = field(default_factory=list)
    reused_files: int = 0  # indexed from the capture of a file with the same text


def same_text(tree: Path, files: Sequence[str]) -> dict[str, list[str]]:
    """Each file that must run -> the files with the same text whose capture it is.

    Same text means the same bytes and the same conftest.py files from the tree's root
    down to the file's folder; a test that reads its own path or module name is the
    exception this does not see (renamed copies of a file are what it is for)."""
    groups: dict[str, list[str]] = {}
    first: dict[str, str] = {}
    conftests: dict[Path, bytes] = {}
    for relative in files:
        digest = hashlib.sha256((tree / relative).read_bytes())
        folder = (tree / relative).parent
        for parent in [folder, *folder.parents]:
            if parent not in conftests:
                conftest = parent / "conftest.py"
                conftests[parent] = conftest.read_bytes() if conftest.is_file() else b""
            if conftests[parent]:
                digest.update(b"\0" + conftests[parent])
            if parent == tree:
                break
        key = digest.hexdigest()
        if key in first:
            groups[first[key]].append(relative)
        else:
            first[key] = relative
            groups[relative] = []
    return groups


def capture_environment(tree: Path, workdir: Path, device_module: str | None) -> TestEnvironment:
    """The device's environment (or the CPU's, with no device) plus torch's graph logs."""
    extra = {
        "TORCH_LOGS": "post_grad_graphs,aot_graphs",
        "TORCH_LOGS_OUT": str(workdir / "torch_logs.txt"),
    }
    if device_module is None:
        extra["PYTORCH_TESTING_DEVICE_ONLY_FOR"] = "cpu"
    return TestEnvironment.for_device(device_module, tree, extra=extra)


def run_capture(
    tree: Path,
    files: Sequence[str],
    workdir: Path,
    device_module: str | None = None,
    progress: Progress | None = None,
    timeout: float = 3600,
    only: Sequence[Key] | None = None,
    known: Sequence[Key] | None = None,
) -> tuple[list[dict[str, Any]], CaptureResult]:
    """Run the files under the capture (`only`: those tests; `known`: with `only`, the
    tests the inventory lists, a test none of them names running too); every line the
    plugin wrote, and what it cost. A process that dies (killed at `timeout`, or crashed)
    after writing more lines is followed by one that leaves those tests out; one that dies
    before its first line ends its files' capture (`lost_files`)."""
    workdir.mkdir(parents=True, exist_ok=True)
    keys = _key_file(workdir / "keys.txt", only)
    known_file = _key_file(workdir / "known.txt", known if only is not None else None)
    result = CaptureResult()
    out = workdir / "capture.jsonl"
    out.unlink(missing_ok=True)
    config = _all_tests_config(workdir, files) if device_module else None
    capture = OperatorCapture(out, tree, keys, known_file)
    pytest = PytestRun(
        capture_environment(tree, workdir, device_module),
        tree,
        configs=[config] if config else [],
        rootdir=tree,
        capture=capture,
        test_timeout=TEST_TIMEOUT if config else None,
        extra_args=["-o", "addopts="],
    )
    # After the first process, each leaves out the tests already written: one that died
    # (killed at `timeout`, or crashed) is started again where it stopped.
    resumed = replace(pytest, capture=replace(capture, resume=True))
    batches: list[list[str]] = [list(files)]
    done_files: set[str] = set()
    while batches:
        batch = batches.pop(0)
        if progress:
            progress("operator index: running tests under capture", len(done_files), len(files))
        before = len(written_ids(out))
        try:
            command = resumed if result.processes else pytest
            completed = replace(command, files=batch).run(timeout=timeout)
            died = completed.returncode not in (0, 1, 5)
        except subprocess.TimeoutExpired:
            died = True
        result.processes += 1
        if died and len(batch) > 1:
            seen = {line.get("file") for line in read_lines(out)}
            batches += [[f] for f in batch if f not in seen or f == _last_file(out)]
            continue
        if died and len(written_ids(out)) > before:
            batches.insert(0, batch)  # it got on: the next process goes on from there
            continue
        if died:  # it died again before finishing a test: that test ends the file's capture
            result.lost_files += batch
        done_files |= set(batch)
    lines = read_lines(out)
    if progress:
        progress("operator index: running tests under capture", len(files), len(files))
    return lines, result


def _all_tests_config(workdir: Path, files: Sequence[str]) -> Path:
    """A reuse config that runs every test of the files (device capture)."""
    entries = "".join(
        f"    - path: ${{TORCH_ROOT}}/{f}\n      unlisted_test_mode: mandatory_success\n"
        for f in files
    )
    path = workdir / "capture-config.yaml"
    path.write_text(f"test_suite_config:\n  files:\n{entries}")
    return path


def _last_file(path: Path) -> str | None:
    lines = read_lines(path)
    return lines[-1].get("file") if lines else None


# -- storing ----------------------------------------------------------------------------


def is_module(variant: str) -> bool:
    """Whether an index row's variant is a `@modules` test's module ("torch.nn.Linear"), not
    an OpInfo: the capture spells modules as configs do, OpInfo names never start so."""
    return variant.startswith("torch.")


def exclusion_kind(variants: Iterable[str]) -> tuple[str, str]:
    """The config section that drops these variants and what a reason calls one:
    ("modules", "module") for a `@modules` test's modules, ("ops", "OpInfo") otherwise."""
    return ("modules", "module") if all(map(is_module, variants)) else ("ops", "OpInfo")


def fold(lines: Iterable[dict[str, Any]]) -> tuple[dict[Key, dict[str, Any]], dict[Key, dict]]:
    """Per generic test: a summary, and {(opinfo, op): (source, is_helper)}."""
    tests: dict[Key, dict[str, Any]] = {}
    usage: dict[Key, dict[tuple[str, str], tuple[str, bool]]] = defaultdict(dict)
    # A file re-run after a crash reports some tests twice: the last report counts.
    unique = {line.get("node_id", n): line for n, line in enumerate(lines)}
    for line in unique.values():
        if "file" not in line:
            continue
        key = (line["file"], line["class"], line["test"])
        test = tests.setdefault(
            key,
            {"variants": 0, "passed": 0, "failed": 0, "skipped": 0, "first_failure": "",
             "opinfos": set(), "dtypes": set(), "modules": set(), "compiled": False,
             "uncaptured": False, "seconds": 0.0},
        )  # fmt: skip
        test["variants"] += 1
        outcome = line.get("outcome", "passed")
        bucket = {"passed": "passed", "xpassed": "passed", "skipped": "skipped"}.get(outcome)
        test[bucket or "failed"] += 1
        if bucket is None and not test["first_failure"]:
            test["first_failure"] = line.get("message", "")[-1500:]
        for name, field_name in (("opinfo", "opinfos"), ("dtype", "dtypes"), ("module", "modules")):
            if line.get(name):
                test[field_name].add(line[name])
        test["compiled"] |= line.get("how") == "compiled"
        test["uncaptured"] |= line.get("how") == "uncaptured"
        test["seconds"] += float(line.get("seconds", 0.0))
        source = OpUsage.Source.COMPILED if line.get("how") == "compiled" else OpUsage.Source.EAGER
        # The variant an op belongs to: its OpInfo, or its module in a `@modules` test.
        opinfo = line.get("opinfo") or line.get("module", "")
        for op in line.get("ops", []):
            usage[key][(opinfo, op)] = (source, False)
        for op in line.get("helper_ops", []):
            usage[key].setdefault((opinfo, op), (source, True))
    return tests, usage


@transaction.atomic
def store(
    lines: Iterable[dict[str, Any]],
    device: str = "cpu",
    whole_files: Sequence[str] = (),
    copies: Mapping[str, Sequence[str]] | None = None,
) -> int:
    """Replace the index's rows for every test in `lines` (and for whole files when
    given); `copies`: file -> files with the same text, which get the same rows."""
    tests, usage = fold(lines)
    copies = {path: list(others) for path, others in (copies or {}).items() if others}
    _delete_stale(tests, [*whole_files, *(f for others in copies.values() for f in others)])
    _insert(
        CapturedTest(
            file_path=key[0],
            class_name=key[1],
            test_name=key[2],
            device=device,
            variants=t["variants"],
            passed=t["passed"],
            failed=t["failed"],
            skipped=t["skipped"],
            first_failure=t["first_failure"],
            opinfos=sorted(t["opinfos"]),
            dtypes=sorted(t["dtypes"]),
            modules=sorted(t["modules"]),
            compiled=t["compiled"],
            uncaptured=t["uncaptured"],
            seconds=round(t["seconds"], 4),
        )
        for key, t in tests.items()
    )
    rows = _insert(
        OpUsage(
            file_path=key[0],
            class_name=key[1],
            test_name=key[2],
            opinfo=opinfo,
            op=op,
            source=source,
            is_helper=is_helper,
        )
        for key, ops in usage.items()
        for (opinfo, op), (source, is_helper) in ops.items()
    )
    _copy_rows(copies)
    per_file: dict[str, int] = defaultdict(int)
    for key, ops in usage.items():
        per_file[key[0]] += len(ops)
    return rows + sum(per_file[path] * len(others) for path, others in copies.items())


def _copy_rows(copies: Mapping[str, Sequence[str]]) -> None:
    """Give each copy the rows just stored for its file, in the database (INSERT ... SELECT:
    a big tree of renamed copies is a million rows, which need not pass through Python)."""
    pairs = [(copy, path) for path, others in copies.items() for copy in others]
    if not pairs:
        return
    quote = connection.ops.quote_name
    with connection.cursor() as cursor:
        for model in (CapturedTest, OpUsage):
            columns = [str(f.column) for f in model._meta.concrete_fields if not f.primary_key]
            kept = ", ".join(quote(c) for c in columns if c != "file_path")
            table = quote(model._meta.db_table)
            cursor.executemany(
                f"INSERT INTO {table} ({quote('file_path')}, {kept}) "
                f"SELECT %s, {kept} FROM {table} WHERE {quote('file_path')} = %s",
                pairs,
            )


def _insert(rows: Iterable[Any], batch: int = 2000) -> int:
    """bulk_create a batch at a time (a big tree's index is hundreds of thousands of
    rows: never all of them in memory as model instances at once); how many."""
    count = 0
    iterator = iter(rows)
    while chunk := list(islice(iterator, batch)):
        type(chunk[0]).objects.bulk_create(chunk)
        count += len(chunk)
    return count


def _delete_stale(tests: Mapping[Key, Any], whole_files: Sequence[str]) -> None:
    """Delete the index's rows for these whole files and these tests, in chunks."""
    whole = sorted(set(whole_files))
    covered = set(whole)
    loose = [key for key in tests if key[0] not in covered]
    chunks = [Q(file_path__in=whole[n : n + 500]) for n in range(0, len(whole), 500)]
    for n in range(0, len(loose), STALE_CHUNK):
        stale = Q(pk__in=[])
        for path, cls, name in loose[n : n + STALE_CHUNK]:
            stale |= Q(file_path=path, class_name=cls, test_name=name)
        chunks.append(stale)
    for stale in chunks:
        OpUsage.objects.filter(stale).delete()
        CapturedTest.objects.filter(stale).delete()


def capture(
    tree: Path | str,
    files: Sequence[str],
    device_module: str | None = None,
    progress: Progress | None = None,
    workdir: Path | None = None,
    only: Sequence[Key] | None = None,
) -> CaptureResult:
    """Run `files` of the tree (or only the tests `only` names) under the capture and
    update the index with what they called."""
    tree = Path(tree).resolve()
    # Tests named one by one (an upgrade's diff) run where they are.
    groups = same_text(tree, files) if only is None else {f: [] for f in files}
    with tempfile.TemporaryDirectory(prefix="crcr-capture-") as scratch:
        folder = workdir or Path(scratch)
        lines, result = run_capture(tree, list(groups), folder, device_module, progress, only=only)
    return record(lines, result, files, groups, device_module, whole=only is None)


def _key_file(path: Path, keys: Sequence[Key] | None) -> Path | None:
    if keys is None:
        return None
    path.write_text("".join(f"{'::'.join(key)}\n" for key in keys))
    return path


def record(
    lines: Sequence[dict[str, Any]],
    result: CaptureResult,
    files: Sequence[str],
    groups: Mapping[str, Sequence[str]],
    device_module: str | None = None,
    whole: bool = True,
) -> CaptureResult:
    """Update the index with what the capture of `files` wrote (`groups`: each file that
    ran -> its copies, `same_text`); `whole`: every test of each file ran, so what the
    index held for the files and did not come back goes. The chunked path calls it too."""
    device = "cpu" if device_module is None else "device"
    result.lost_files += [copy for f in result.lost_files for copy in groups.get(f, [])]
    copies = {f: others for f, others in groups.items() if f not in result.lost_files}
    kept = [f for f in files if f not in result.lost_files] if whole else []
    result.rows = store(lines, device=device, whole_files=kept, copies=copies)
    result.reused_files = sum(len(others) for others in copies.values())
    # What the index now holds for the files: what ran, and as much again per copy.
    times = {f: 1 + len(others) for f, others in copies.items()}
    keys = {(line.get("file"), line.get("class"), line.get("test")) for line in lines}
    result.tests = sum(times.get(str(key[0]), 1) for key in keys)
    result.variants = sum(times.get(str(line.get("file")), 1) for line in lines)
    return result


# -- reading ------------------------------------------------------------------------------


def ops_of(keys: Iterable[Key]) -> dict[Key, dict[str, dict[str, bool]]]:
    """test -> {opinfo: {op: is_helper}} for the given tests."""
    wanted = set(keys)
    files = {key[0] for key in wanted}
    out: dict[Key, dict[str, dict[str, bool]]] = {}
    rows = OpUsage.objects.filter(file_path__in=files).values_list(
        "file_path", "class_name", "test_name", "opinfo", "op", "is_helper"
    )
    for path, cls, name, opinfo, op, helper in rows.iterator(chunk_size=5000):
        key = (path, cls, name)
        if key in wanted:
            out.setdefault(key, {}).setdefault(opinfo, {})[op] = helper
    return out


def captured_keys(files: Iterable[str]) -> set[Key]:
    """The generic tests the index holds for the files."""
    rows = CapturedTest.objects.filter(file_path__in=list(files))
    return set(rows.values_list("file_path", "class_name", "test_name"))


def tests_using(packet: str) -> list[Key]:
    """Tests whose recorded calls include any overload of the operator `packet`."""
    rows = (
        OpUsage.objects.filter(Q(op=packet) | Q(op__startswith=f"{packet}."))
        .values_list("file_path", "class_name", "test_name")
        .distinct()
    )
    return sorted(set(rows))
