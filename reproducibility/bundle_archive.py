"""A bundle's `.tar.gz` written as a stream: each file read once, hashed as it is packed.

Every member goes under one top folder, owned by nobody (uid and gid 0, no names), its
SHA-256 and size recorded as its bytes pass; `close` adds `manifest.json` last, listing
them. Nothing is copied to a scratch folder first and nothing is read twice.

Compression is gzip at level 6, the default of `gzip` and so of `tar czf`, each part of
the archive in a thread of its own (zlib lets go of the GIL while it compresses): a
part (`part()`: the results) is packed by another thread while the main one reads the
database and writes the documents, and the parts' gzip streams are joined at the end
(a gzip file may hold several members; unpacked, they are one tar stream).
"""

import gzip
import hashlib
import json
import os
import queue
import shutil
import tarfile
import threading
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

COMPRESS_LEVEL = 6
NUL = tarfile.NUL
CHUNK = 1 << 20  # bytes handed to the compressing thread at a time
# Large lists (every attempt, every test id) one item a line: readable, and encoded by
# the json module's C encoder (with `indent` it falls back to pure Python: 8 s for a
# run of 100,000 results).
ENCODER = json.JSONEncoder(sort_keys=True)


class Encoded(list[str]):
    """A list whose items are JSON texts already (made by the database)."""


def json_document(data: Any) -> bytes:
    """A JSON document: one top-level key a line, a list's items one a line."""
    if not isinstance(data, dict) or not data:
        return (ENCODER.encode(data) + "\n").encode()
    parts = ["{\n"]
    for key in sorted(data):
        value = data[key]
        parts.append(f"  {ENCODER.encode(key)}: ")
        if isinstance(value, list) and value:
            texts = value if isinstance(value, Encoded) else map(ENCODER.encode, value)
            parts += ["[\n    ", ",\n    ".join(texts), "\n  ]"]
        else:
            parts.append(ENCODER.encode(value))
        parts.append(",\n")
    parts[-1] = "\n}\n"
    return "".join(parts).encode()


class _CompressingWriter:
    """A write-only file object: what it is given is gzipped into `path` by a thread."""

    def __init__(self, path: Path) -> None:
        self._file = path.open("wb")
        self._gzip = gzip.GzipFile(fileobj=self._file, mode="wb", compresslevel=COMPRESS_LEVEL)
        self._pending = bytearray()
        self._queue: queue.Queue[bytes | None] = queue.Queue(maxsize=32)
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._drain, name="bundle-gzip", daemon=True)
        self._thread.start()

    def write(self, data: bytes) -> int:
        self._pending += data
        if len(self._pending) >= CHUNK:
            self._hand_over()
        return len(data)

    def _hand_over(self) -> None:
        if self._error is not None:
            raise OSError(f"compressing the bundle failed: {self._error}") from self._error
        self._queue.put(bytes(self._pending))
        self._pending.clear()

    def _drain(self) -> None:
        while (chunk := self._queue.get()) is not None:
            if self._error is None:
                try:
                    self._gzip.write(chunk)
                except BaseException as error:  # noqa: BLE001  (raised in the writer's thread)
                    self._error = error

    def close(self) -> None:
        """Compress what is left and close the file; raises what the thread met."""
        if self._file.closed:
            return
        try:
            if self._pending:
                self._hand_over()
        finally:
            self._queue.put(None)
            self._thread.join()
            if self._error is None:
                self._gzip.close()
            self._file.close()
        if self._error is not None:
            raise OSError(f"compressing the bundle failed: {self._error}") from self._error


def _chunks(descriptor: int, size: int) -> Iterator[bytes]:
    """`size` bytes of an open file, a chunk at a time (fewer when the file shrank)."""
    left = size
    while left > 0 and (chunk := os.read(descriptor, min(left, CHUNK))):
        left -= len(chunk)
        yield chunk


def _ustar_header(name: str, kind: bytes, mode: int, size: int, mtime: int) -> bytes | None:
    """A ustar header for a short ASCII name (what tar writes), None for any other."""
    raw = name.encode("ascii", "replace")
    if len(raw) > 100 or raw.decode("ascii", "replace") != name or size >= 8**11:
        return None
    header = b"".join((
        raw.ljust(100, NUL), b"%07o\0" % mode, b"0000000\0", b"0000000\0", b"%011o\0" % size,
        b"%011o\0" % mtime, b" " * 8, kind, NUL * 100, b"ustar\x0000", NUL * 64,
        b"0000000\0", b"0000000\0", NUL * 167,
    ))  # fmt: skip
    return header[:148] + b"%06o\0 " % sum(header) + header[156:]


class Part:
    """A run of members, compressed into a file of its own; one thread writes it."""

    def __init__(self, path: Path, top: str, mtime: int, folders: set[str]) -> None:
        self.path, self.top, self.mtime = path, top, mtime
        self.files: list[dict[str, Any]] = []
        self.folders = folders
        self.written = 0
        self.writer = _CompressingWriter(path)

    def add_bytes(self, relative: str, data: bytes, mode: int = 0o644) -> None:
        self._add(relative, len(data), [data], mode)

    def add_file(self, relative: str, source: str | Path, mode: int = 0o644) -> None:
        """A file, read once; a symbolic link is refused (ELOOP), never followed."""
        descriptor = os.open(source, os.O_RDONLY | os.O_NOFOLLOW)
        try:
            size = os.fstat(descriptor).st_size
            self._add(relative, size, _chunks(descriptor, size), mode)
        finally:
            os.close(descriptor)

    def add_folder(self, relative: str, source: Path) -> None:
        """Every regular file under `source`, by name (executables keep their bit)."""
        for path in sorted(p for p in source.rglob("*") if p.is_file() and not p.is_symlink()):
            mode = 0o755 if path.stat().st_mode & 0o111 else 0o644
            self.add_file(f"{relative}/{path.relative_to(source).as_posix()}", path, mode)

    def _add(self, relative: str, size: int, chunks: Iterable[bytes], mode: int) -> None:
        """A member: its header, its bytes (hashed as they pass), padding to a block."""
        self._folder(relative.rpartition("/")[0])
        self.write(self._header(relative, tarfile.REGTYPE, mode, size))
        digest, written = hashlib.sha256(), 0
        for chunk in chunks:
            digest.update(chunk)
            self.write(chunk)
            written += len(chunk)
        if written != size:
            raise OSError(f"{relative} shrank from {size} to {written} bytes while packed")
        self.write(NUL * (-size % tarfile.BLOCKSIZE))
        self.files.append({"path": relative, "sha256": digest.hexdigest(), "size": size})

    def _folder(self, relative: str) -> None:
        """A folder's member (and its parents'), once: unpacked, it gets its own mode."""
        if relative in self.folders:
            return
        if relative:
            self._folder(relative.rpartition("/")[0])
        self.folders.add(relative)
        self.write(self._header(f"{relative}/".lstrip("/"), tarfile.DIRTYPE, 0o755, 0))

    def _header(self, relative: str, kind: bytes, mode: int, size: int) -> bytes:
        name = f"{self.top}/{relative}"
        fast = _ustar_header(name, kind, mode, size, self.mtime)
        if fast is not None:
            return fast
        info = tarfile.TarInfo(name)  # a long or non-ASCII name: a pax header carries it
        info.type, info.mode, info.size, info.mtime = kind, mode, size, self.mtime
        return info.tobuf(tarfile.PAX_FORMAT, "utf-8", "surrogateescape")

    def write(self, data: bytes) -> None:
        self.writer.write(data)
        self.written += len(data)


class BundleArchive(Part):
    """The archive being written: its own members, then (first in the file) its parts'."""

    def __init__(self, path: Path, top: str) -> None:
        # A float mtime would cost each member a pax header.
        super().__init__(path.with_name(f"{path.name}.main"), top, int(time.time()), set())
        self.target = path
        self.parts: list[Part] = []

    def part(self) -> Part:
        """A part of its own, for another thread; it goes before this one's members."""
        made = Part(self.target.with_name(f"{self.target.name}.{len(self.parts)}"),
                     self.top, self.mtime, {""})  # fmt: skip
        self.parts.append(made)
        return made

    @property
    def all_files(self) -> list[dict[str, Any]]:
        return [entry for part in (*self.parts, self) for entry in part.files]

    def add_json(self, relative: str, data: Any) -> None:
        self.add_bytes(relative, json_document(data))

    def close(self, manifest: dict[str, Any]) -> None:
        """Add `manifest.json`, end the tar stream (two empty blocks, then zeros to a whole
        record, as tar does) and join the parts' gzip streams into the archive."""
        try:
            self.add_bytes("manifest.json", json_document(manifest))
            for part in self.parts:
                self.written += part.written
            self.write(NUL * 2 * tarfile.BLOCKSIZE)
            self.write(NUL * (-self.written % tarfile.RECORDSIZE))
        finally:
            self.abandon()
        with self.target.open("wb") as out:
            for part in (*self.parts, self):
                with part.path.open("rb") as stream:
                    shutil.copyfileobj(stream, out, CHUNK)
                part.path.unlink()

    def abandon(self) -> None:
        """Stop writing: every compressing thread ends and its file is closed; the first
        error met is raised."""
        errors = []
        for part in (*self.parts, self):
            try:
                part.writer.close()
            except OSError as error:
                errors.append(error)
        if errors:
            raise errors[0]
