"""Repo memory: PyTorch's test tree at a SHA, scanned into the database.

Steps of `scan()`:
1. list `test/**/test_*.py` under the tree root and hash each file;
2. a file whose (path, hash) was already parsed in any snapshot is copied from
   there (its tests, summaries and embeddings), not parsed again;
3. the others are parsed (`selection.source_facts`, no torch; a file with the same
   bytes as one parsed in this scan, a renamed copy, takes its facts) and embedded
   (`selection.embeddings`, loaded lazily, only when something new needs it; each
   distinct text once);
4. everything lands in one transaction per snapshot; re-scanning a SHA replaces it.

`diff()` compares two snapshots by per-test content hash; `query()` ranks tests
or files against a phrase by cosine similarity of their embeddings.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from django.db import transaction

from selection import scope
from selection.models import InventorySnapshot, TestFile, UpstreamTest
from selection.source_facts import ParsedFile, file_hash, parse_file

Progress = Callable[[str, int, int], None]
BULK = 1000


def _quiet(stage: str, done: int, total: int) -> None:
    return None


def test_files(tree_root: Path) -> list[Path]:
    """The tree's test files, relative paths sorted (test/…/test_*.py)."""
    folder = tree_root / "test"
    if not folder.is_dir():
        raise FileNotFoundError(f"{tree_root} has no test/ folder: not a PyTorch test tree")
    return sorted(
        path.relative_to(tree_root)
        for path in folder.rglob("test_*.py")
        if "__pycache__" not in path.parts
    )


def scan(
    tree_root: Path | str,
    pytorch_sha: str,
    progress: Progress = _quiet,
    embed: bool = True,
) -> InventorySnapshot:
    """Inventory the tree at `pytorch_sha`; unchanged files are reused, not re-parsed."""
    started = time.monotonic()
    root = Path(tree_root).resolve()
    paths = test_files(root)
    parsed: list[ParsedFile] = []
    reused: list[tuple[str, TestFile]] = []
    by_hash: dict[str, ParsedFile] = {}  # this scan's parses: a renamed copy is not re-read
    for n, relative in enumerate(paths, start=1):
        data = (root / relative).read_bytes()
        digest = file_hash(data)
        known = (
            TestFile.objects.filter(path=str(relative), content_hash=digest)
            .exclude(snapshot__pytorch_sha=pytorch_sha)
            .order_by("-snapshot__created_at")
            .first()
        )
        if known is not None:
            reused.append((str(relative), known))
        elif digest in by_hash:
            parsed.append(by_hash[digest].renamed(str(relative)))
        else:
            parsed.append(by_hash.setdefault(digest, parse_file(str(relative), data, root)))
        progress("inventory: reading test files", n, len(paths))
    vectors = _embed(parsed, progress) if embed else {}
    with transaction.atomic():
        InventorySnapshot.objects.filter(pytorch_sha=pytorch_sha).delete()
        snapshot = InventorySnapshot.objects.create(pytorch_sha=pytorch_sha, root=str(root))
        _store_parsed(snapshot, parsed, vectors)
        _copy_reused(snapshot, [known for _, known in reused])
        snapshot.stats = {
            "files": len(paths),
            "parsed": len(parsed),
            "reused": len(reused),
            "tests": UpstreamTest.objects.filter(file__snapshot=snapshot).count(),
            "seconds": round(time.monotonic() - started, 3),
        }
        snapshot.save(update_fields=["stats"])
    return snapshot


def _embed(parsed: list[ParsedFile], progress: Progress) -> dict[tuple[str, str, str], bytes]:
    """Vectors for new files and their tests, keyed (path, class, test); ("path","","") for files."""
    texts: dict[tuple[str, str, str], str] = {}
    for item in parsed:
        texts[(item.path, "", "")] = f"{item.path}: {item.summary}"
        for test in item.tests:
            texts[(item.path, test.class_name, test.test_name)] = (
                f"{test.summary}. {test.docstring}".strip()
            )
    if not texts:
        return {}
    from selection import embeddings

    # Each distinct text once: renamed copies, and tests that say the same, share one.
    unique = sorted(set(texts.values()))
    vectors: list[bytes] = []
    for start in range(0, len(unique), embeddings.BATCH * 4):
        vectors += embeddings.encode(unique[start : start + embeddings.BATCH * 4])
        progress("inventory: embedding tests and files", len(vectors), len(unique))
    by_text = dict(zip(unique, vectors, strict=True))
    return {key: by_text[text] for key, text in texts.items()}


def _store_parsed(
    snapshot: InventorySnapshot,
    parsed: list[ParsedFile],
    vectors: dict[tuple[str, str, str], bytes],
) -> None:
    files = TestFile.objects.bulk_create(
        TestFile(
            snapshot=snapshot,
            path=item.path,
            content_hash=item.content_hash,
            summary=item.summary,
            embedding=vectors.get((item.path, "", "")),
            area=scope.area_of(item.path),
            parse_error=item.error,
        )
        for item in parsed
    )
    rows = [
        UpstreamTest(
            file=row,
            class_name=test.class_name,
            test_name=test.test_name,
            decorators=test.decorators,
            device_restrictions=test.device_restrictions,
            ops=test.ops,
            modules=test.modules,
            dtypes=test.dtypes,
            docstring=test.docstring,
            summary=test.summary,
            content_hash=test.content_hash,
            embedding=vectors.get((item.path, test.class_name, test.test_name)),
            line=test.line,
            device_generic=test.device_generic,
            parametrize=test.parametrize,
        )
        for row, item in zip(files, parsed, strict=True)
        for test in item.tests
    ]
    UpstreamTest.objects.bulk_create(rows, batch_size=BULK)


def _copy_reused(snapshot: InventorySnapshot, known: list[TestFile]) -> None:
    """Copy already-parsed files into the new snapshot (rows, not parsing)."""
    if not known:
        return
    copies = TestFile.objects.bulk_create(
        TestFile(
            snapshot=snapshot,
            path=f.path,
            content_hash=f.content_hash,
            summary=f.summary,
            embedding=f.embedding,
            area=f.area,
            parse_error=f.parse_error,
        )
        for f in known
    )
    by_source = {f.pk: copy for f, copy in zip(known, copies, strict=True)}
    fields = [f.name for f in UpstreamTest._meta.concrete_fields if f.name not in ("id", "file")]
    tests = UpstreamTest.objects.filter(file__in=known).values("file_id", *fields)
    UpstreamTest.objects.bulk_create(
        (
            UpstreamTest(file=by_source[row.pop("file_id")], **row)
            for row in tests.iterator(chunk_size=BULK)
        ),
        batch_size=BULK,
    )


# -- diffs and queries -----------------------------------------------------------------


@dataclass
class TreeDiff:
    added: list[tuple[str, str, str]] = field(default_factory=list)
    changed: list[tuple[str, str, str]] = field(default_factory=list)
    removed: list[tuple[str, str, str]] = field(default_factory=list)
    unchanged: int = 0

    @property
    def to_classify(self) -> list[tuple[str, str, str]]:
        return sorted(self.added + self.changed)

    def as_dict(self) -> dict[str, object]:
        return {
            "added": [list(k) for k in self.added],
            "changed": [list(k) for k in self.changed],
            "removed": [list(k) for k in self.removed],
            "unchanged": self.unchanged,
        }


def diff(old: InventorySnapshot, new: InventorySnapshot) -> TreeDiff:
    """Tests added, changed (content hash differs) and removed between two snapshots."""
    before, after = old.test_hashes(), new.test_hashes()
    result = TreeDiff()
    for key, digest in after.items():
        if key not in before:
            result.added.append(key)
        elif before[key] != digest:
            result.changed.append(key)
        else:
            result.unchanged += 1
    result.removed = sorted(key for key in before if key not in after)
    result.added.sort()
    result.changed.sort()
    return result


@dataclass
class Match:
    path: str
    class_name: str
    test_name: str
    summary: str
    score: float


def query(
    snapshot: InventorySnapshot, phrase: str, kind: str = "tests", limit: int = 10
) -> list[Match]:
    """Tests (or files) of the snapshot closest in meaning to the phrase, best first."""
    from selection import embeddings

    vector = embeddings.encode([phrase])[0]
    candidates: Iterable[tuple[str, str, str, str, Any]]
    if kind == "files":
        candidates = (
            (path, "", "", summary, blob)
            for path, summary, blob in snapshot.files.values_list("path", "summary", "embedding")
        )
    else:
        candidates = UpstreamTest.objects.filter(file__snapshot=snapshot).values_list(
            "file__path", "class_name", "test_name", "summary", "embedding"
        )
    rows = list(candidates)
    scores = embeddings.similarities(vector, [row[4] for row in rows])
    ranked = sorted(zip(rows, scores, strict=True), key=lambda pair: -pair[1])[:limit]
    return [Match(row[0], row[1], row[2], row[3], round(score, 4)) for row, score in ranked]
