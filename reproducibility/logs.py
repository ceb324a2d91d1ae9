"""A run's logs as its log pages show them: a failed test's trace, and each shard's output.

Device hosts send each pytest process's files to storage (`runs.workfiles`) under
`runs/<run>/shard-<index>/attempt-<claim>/pNNN.{log,junit.xml,progress.jsonl,ids}`; the
pages read them from there, whatever the storage (a folder, S3), by names made of the
run's UUID and numbers only: no input names a file. A log is read as a stream, a block at
a time, and a page holds `LINES_PER_PAGE` of its lines: never a whole log, however long.
Every line shown is redacted (`crcr_site.lib.redaction`), as stored messages are.

A failed test's trace is its JUnit XML failure text (the whole of pytest's report), else
the message stored with its attempt (a crash or a hang has no JUnit entry); its error
line (`runs.triage.error_line_index`) is the one highlighted.
"""

import re
import shlex
import xml.etree.ElementTree as ElementTree
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from crcr_reuse.idlist import normalize_class
from crcr_reuse.outcomes import canonical, junit_address
from django.core.files.storage import default_storage
from django.db.models import Case, IntegerField, Value, When

from crcr_site.lib.redaction import known_secrets, redact
from reproducibility import metadata
from runs import workfiles
from runs.models import Failure, Run, Shard, TestResult
from runs.triage import error_line_index, is_error_line

LINES_PER_PAGE = 400
LINE_BYTES = 4000  # a longer line is shown cut, with how much was left out
TRACE_LINES = 3000  # a trace longer than this is cut; its process output has the rest
FAILURES_NOTED = 200  # failures remembered per log, for its jump links
OTHER_FAILURES = 20  # the run's other failures listed on a test's log page

_PROCESS_LOG = re.compile(r"/attempt-(\d+)/p(\d+)\.log$")
_JUNIT = re.compile(r"/attempt-(\d+)/p(\d+)\.junit\.xml$")
# pytest's header of a failure's section: `____ TestX.test_y ____`.
_HEADER = re.compile(r"^_{3,} (?P<name>.+?) _{3,}$")


@dataclass
class Line:
    number: int
    text: str
    failing: bool = False


@dataclass(frozen=True)
class ProcessLog:
    """One pytest process's output: the shard's claim it ran in and its number there."""

    claim: int
    process: int
    name: str  # in storage

    @property
    def label(self) -> str:
        return f"claim {self.claim} · process {self.process}"


@dataclass
class Page:
    """A page of a log: its lines, where it is, and where the log's failures are."""

    lines: list[Line]
    number: int
    pages: int
    total: int
    failures: list[tuple[int, int]]  # (line, page) of each failure's error line
    target: int | None = None  # the line asked for (a test's section), when found

    @property
    def span(self) -> tuple[int, int]:
        return (self.lines[0].number, self.lines[-1].number) if self.lines else (0, 0)


def shard_logs(run: Run, index: int) -> list[ProcessLog]:
    """The shard's process outputs in storage, by claim then process."""
    found = []
    for name in workfiles.listed(f"runs/{run.uuid}/shard-{index}"):
        if match := _PROCESS_LOG.search(name):
            found.append(ProcessLog(int(match[1]), int(match[2]), name))
    return sorted(found, key=lambda log: (log.claim, log.process))


def _lines(name: str) -> Iterator[str]:
    """A stored file's lines, decoded and redacted, read a block at a time; a line longer
    than LINE_BYTES is cut there, saying how much was left out."""
    secrets = known_secrets()
    kept, dropped = b"", 0

    def done() -> str:
        text = kept.decode(errors="replace").rstrip("\r")
        extra = f" … ({dropped:,} more bytes on this line)" if dropped else ""
        return redact(text, secrets) + extra

    with default_storage.open(name, "rb") as stream:
        while block := stream.read(1 << 16):
            parts = block.split(b"\n")
            for n, part in enumerate(parts):
                room = LINE_BYTES - len(kept)
                kept, dropped = kept + part[:room], dropped + max(0, len(part) - room)
                if n < len(parts) - 1:
                    yield done()
                    kept, dropped = b"", 0
    if kept or dropped:
        yield done()


def _header_key(name: str) -> str:
    """A section header's test (`TestXPRIVATEUSEONE.test_y`) with the class spelled as crcr
    keys it."""
    owner, dot, test = name.partition(".")
    return f"{normalize_class(owner)}.{test}" if dot else name


def test_header(node_id: str) -> str:
    """How pytest heads a test's failure section: `TestX.test_y` or `test_y`."""
    return _header_key(".".join(canonical(node_id).split("::")[1:]))


def read_page(name: str, page: int | None = None, test: str = "") -> Page:
    """A page of a stored log. Without a page: the one holding `test`'s section when it has
    one, else the first failure's, else the first.

    One pass over the log, a block at a time: it counts the lines, marks each failure's
    error line (the first `E` line naming an exception in a section), finds the test's
    section, and keeps the lines of the pages that may be shown (the one asked for, else
    the test's, the first failure's and the first): at most four pages, never the log.
    """
    total, target = 0, None
    failures: list[int] = []
    wanted, section, noted_section = test_header(test) if test else "", 0, -1
    current: list[Line] = []
    kept: dict[str, list[Line]] = {}  # the candidate pages: asked, target, failure, first
    for number, text in enumerate(_lines(name), start=1):
        total = number
        if (number - 1) % LINES_PER_PAGE == 0:
            current = []  # a page begins; the list of one kept goes on filling until it ends
        line = Line(number, text)
        current.append(line)
        if header := _HEADER.match(text):
            section += 1
            if target is None and wanted and _header_key(header["name"]) == wanted:
                target = number
                kept.setdefault("target", current)
        elif is_error_line(text) and noted_section != section and len(failures) < FAILURES_NOTED:
            line.failing, noted_section = True, section
            failures.append(number)
            kept.setdefault("failure", current)
        if page is not None and (number - 1) // LINES_PER_PAGE + 1 == page:
            kept.setdefault("asked", current)
        if number == 1:
            kept["first"] = current
    order = ("asked",) if page is not None else ("target", "failure", "first")
    lines = next((kept[key] for key in order if key in kept), current)  # past the end: the last
    pages = max(1, -(-total // LINES_PER_PAGE))
    number = (lines[0].number - 1) // LINES_PER_PAGE + 1 if lines else 1
    located = [(line, (line - 1) // LINES_PER_PAGE + 1) for line in failures]
    return Page(lines, number, pages, total, located, target)


@dataclass
class TestLog:
    """A failed test's log page: its attempts, the one shown, its trace and its failure."""

    node_id: str
    attempts: list[TestResult]
    shown: TestResult
    failure: Failure | None
    trace: list[Line] = field(default_factory=list)
    from_report: bool = False  # the trace is the JUnit report's (else the stored message)
    cut: bool = False
    process: ProcessLog | None = None  # the process output holding its failure

    @property
    def failing_line(self) -> Line | None:
        return next((line for line in self.trace if line.failing), None)


def first_failure(run: Run) -> str:
    """The test a run's log opens on: its first regression, else its first classified
    failure, else its first failing test (a run still running); "" when none failed."""
    if (failure := _ranked(run.failures.all()).first()) is not None:
        return failure.result.node_id
    failing = run.results.filter(outcome__in=TestResult.FAILING).order_by("node_id")
    return failing.values_list("node_id", flat=True).first() or ""


def other_failures(run: Run, node_id: str) -> list[Failure]:
    return list(_ranked(run.failures.exclude(result__node_id=node_id))[:OTHER_FAILURES])


def _ranked(failures: Any) -> Any:
    rank = Case(
        When(verdict=Failure.Verdict.REGRESSION, then=Value(0)),
        default=Value(1),
        output_field=IntegerField(),
    )
    return failures.select_related("result").order_by(rank, "result__node_id")


def test_log(run: Run, node_id: str, attempt: int | None = None) -> TestLog | None:
    """A test's log in the run (its `attempt`, else the one its failure was classified on,
    else its last); None when no test of that id ran."""
    attempts = list(
        run.results.filter(node_id=canonical(node_id)).select_related("shard").order_by("attempt")
    )
    if not attempts:
        return None
    failure = Failure.objects.filter(result__in=attempts).first()
    by_number = {result.attempt: result for result in attempts}
    shown = by_number.get(attempt or 0) or (failure.result if failure else attempts[-1])
    shown = by_number[shown.attempt]  # with its shard
    log = TestLog(shown.node_id, attempts, shown, failure)
    report = _reported(run, shown, attempts)
    text = report[0] if report else shown.message
    log.from_report, log.process = bool(report), report[1] if report else None
    lines = [redact(line) for line in text.splitlines()]
    log.cut = len(lines) > TRACE_LINES
    lines = lines[-TRACE_LINES:]  # the end holds the error
    failing = error_line_index(lines)
    log.trace = [Line(n, line, n - 1 == failing) for n, line in enumerate(lines, start=1)]
    if log.process is None:
        logs = shard_logs(run, shown.shard.index)
        log.process = logs[-1] if logs else None
    return log


def _reported(
    run: Run, shown: TestResult, attempts: list[TestResult]
) -> tuple[str, ProcessLog] | None:
    """The JUnit failure text of the attempt shown, and its process's output, from storage.

    The shard's last claim that reported the test holds its attempts, one process each in
    order; a crash or a hang wrote no entry, so the attempt shown is the n-th entry, n
    counting the attempts before it that ended by themselves."""
    if shown.outcome in (TestResult.Outcome.CRASHED, TestResult.Outcome.TIMED_OUT):
        return None
    address = junit_address(shown.node_id)
    entries: dict[int, list[tuple[str, int]]] = {}
    for name in workfiles.listed(f"runs/{run.uuid}/shard-{shown.shard.index}"):
        if match := _JUNIT.search(name):
            for text in _junit_texts(name, address):
                entries.setdefault(int(match[1]), []).append((text, int(match[2])))
    if not entries:
        return None
    claim = max(entries)
    ended = [a for a in attempts if a.attempt < shown.attempt and a.outcome not in (
        TestResult.Outcome.CRASHED, TestResult.Outcome.TIMED_OUT)]  # fmt: skip
    found = entries[claim]
    if len(ended) >= len(found):
        return None
    text, process = found[len(ended)]
    if not text:
        return None
    name = f"runs/{run.uuid}/shard-{shown.shard.index}/attempt-{claim}/p{process:03d}.log"
    return text, ProcessLog(claim, process, name)


def _junit_texts(name: str, address: tuple[str, str]) -> Iterator[str]:
    """The failure texts of the test's entries in a stored JUnit file ("" for an entry that
    did not fail); a file that does not parse gives none."""
    classname, test = address
    try:
        with default_storage.open(name, "rb") as stream:
            for _, element in ElementTree.iterparse(stream, events=("end",)):
                if element.tag != "testcase":
                    continue
                same_class = normalize_class(element.get("classname", "")) == classname
                if same_class and element.get("name") == test:
                    failed = [c for c in element if c.tag in ("failure", "error")]
                    yield (failed[0].text or failed[0].get("message") or "") if failed else ""
                element.clear()
    except ElementTree.ParseError:
        return


def reproduce(run: Run, node_id: str) -> dict[str, Any]:
    """How to run the test again: the bundle's command, and the recorded pytest command and
    variables (`reproducibility.metadata.reproduction`)."""
    facts = metadata.reproduction(run)
    return {
        "bundle": f"python reproduce --test {shlex.quote(node_id)}",
        "pytest": facts["command"].get("python", ""),
        "cwd": facts["command"].get("cwd", ""),
        "env": [redact(f"{name}={shlex.quote(value)}") for name, value in facts["env"].items()],
    }


def shard_for(run: Run, index: int) -> Shard | None:
    return run.shards.listed().filter(index=index).first()
