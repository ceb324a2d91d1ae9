"""Failure classification and verdicts (DESIGN §2.6, "Classify").

Pure logic (no Django, no torch). Two steps:

1. `classify()` names what a failure is: ordered rules from
   `runs/classification_rules.yaml` over the message and traceback, read from the
   end, so the error a traceback ends in wins over one it mentions earlier.
2. `decide_verdict()` names what it means for the job: a `regression` (it passed in
   the job's last green run), `flaky` (passed on a retry), `known` (already failing
   there, or disabled upstream) or `infra`. Only a regression makes a job red.

Matching PyTorch's disabled tests (`disabled-tests-condensed.json`) to our names:

- an entry counts when its platform list is empty (every platform) or names
  `linux` (crcr's workers run Linux; rocm/mac/win/xpu/slow/dynamo-only entries
  describe other configurations);
- first the exact name and class (`test_x (__main__.TestFoo)`) are compared;
- then, for device-generic tests (the class ends in a device suffix such as
  `CUDA`, `CPU`, `PRIVATEUSEONE`), both sides are reduced to the generic class
  (suffix removed) and the generic test (the last `_<device>` token removed), so
  `test_foo_cuda_float32 (TestBarCUDA)` covers our
  `test_foo_privateuseone_float32 (TestBarPRIVATEUSEONE)`: upstream has declared
  that test broken on some device, so our failure of it is not our regression.
  Classes without a device suffix (`TestNN`) only ever match exactly, because a
  `_cuda` in their test names is part of the test, not a generated suffix.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import yaml

RULES_PATH = Path(__file__).with_name("classification_rules.yaml")


class Category(StrEnum):
    UNSUPPORTED_OP = "unsupported_op"
    UNSUPPORTED_DTYPE = "unsupported_dtype"
    NUMERICAL_MISMATCH = "numerical_mismatch"
    CRASH = "crash"
    TIMEOUT = "timeout"
    INFRA = "infra"
    TEST_ERROR = "test_error"
    OTHER = "other"


# PyTorch's ScalarType names, as its error messages print them, to dtype names.
SCALAR_TYPES = {
    "Half": "float16",
    "BFloat16": "bfloat16",
    "Float": "float32",
    "Double": "float64",
    "ComplexHalf": "complex32",
    "ComplexFloat": "complex64",
    "ComplexDouble": "complex128",
    "Bool": "bool",
    "Byte": "uint8",
    "Char": "int8",
    "Short": "int16",
    "Int": "int32",
    "Long": "int64",
    "UInt16": "uint16",
    "UInt32": "uint32",
    "UInt64": "uint64",
    "Float8_e4m3fn": "float8_e4m3fn",
    "Float8_e5m2": "float8_e5m2",
    "Float8_e4m3fnuz": "float8_e4m3fnuz",
    "Float8_e5m2fnuz": "float8_e5m2fnuz",
}


@dataclass(frozen=True)
class Rule:
    name: str
    category: Category
    patterns: tuple[re.Pattern[str], ...]
    op_group: str = "op"
    dtype_group: str = "dtype"


@dataclass(frozen=True)
class Classification:
    category: Category
    rule: str | None = None  # None for `other`
    line: str = ""  # the decisive line
    op: str | None = None  # `add`, or `ns::name` outside aten
    op_overload: str | None = None  # `add.Tensor`
    dtype: str | None = None  # `float16`


_RULE_KEYS = {"name", "category", "patterns", "op_group", "dtype_group", "ignore_case"}


def parse_rules(data: Any, source: str = "rules") -> tuple[Rule, ...]:
    """Validate and compile rules (the YAML's parsed content); errors name the rule."""
    if not isinstance(data, dict) or not isinstance(data.get("rules"), list):
        raise ValueError(f"{source}: expected a mapping with a `rules` list")
    rules: list[Rule] = []
    for n, entry in enumerate(data["rules"], start=1):
        where = f"{source}: rule {n}"
        if not isinstance(entry, dict):
            raise ValueError(f"{where}: expected a mapping")
        if unknown := set(entry) - _RULE_KEYS:
            raise ValueError(f"{where}: unknown keys {sorted(unknown)}")
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            raise ValueError(f"{where}: `name` is required")
        where = f"{source}: rule {name!r}"
        if name in {rule.name for rule in rules}:
            raise ValueError(f"{where}: the name is used twice")
        try:
            category = Category(str(entry.get("category")))
        except ValueError:
            raise ValueError(f"{where}: unknown category {entry.get('category')!r}") from None
        if category is Category.OTHER:
            raise ValueError(f"{where}: `other` is what no rule matched; it takes no rules")
        patterns = entry.get("patterns")
        if not isinstance(patterns, list) or not patterns:
            raise ValueError(f"{where}: `patterns` must be a non-empty list")
        flags = re.IGNORECASE if entry.get("ignore_case") else 0
        compiled = []
        for pattern in patterns:
            try:
                compiled.append(re.compile(str(pattern), flags))
            except re.error as error:
                raise ValueError(f"{where}: bad pattern {pattern!r}: {error}") from None
        rules.append(
            Rule(
                name,
                category,
                tuple(compiled),
                op_group=str(entry.get("op_group", "op")),
                dtype_group=str(entry.get("dtype_group", "dtype")),
            )
        )
    return tuple(rules)


def load_rules(path: Path = RULES_PATH) -> tuple[Rule, ...]:
    return parse_rules(yaml.safe_load(path.read_text()), str(path))


@functools.cache
def default_rules() -> tuple[Rule, ...]:
    return load_rules(RULES_PATH)


_FRAME = re.compile(r'^\s*File "[^"]*", line \d+')
_CARETS = re.compile(r"^\s*[\^~]+\s*$")


def _readable_lines(text: str) -> list[str]:
    """The lines a rule may decide on: quoted source code is left out (the line
    under a `File "…", line N` frame, pytest's `>` line, caret markers)."""
    lines = text.splitlines()
    kept = []
    for n, line in enumerate(lines):
        if line.startswith(">") or _CARETS.match(line):
            continue
        after_frame = n > 0 and _FRAME.match(lines[n - 1]) and not _FRAME.match(line)
        if after_frame and line.startswith("    "):
            continue
        kept.append(line)
    return kept


# An exception's own line: `AssertionError: …`, `torch.OutOfMemoryError`, `Failed: …`.
_EXCEPTION = re.compile(
    r"^(?:[A-Za-z_][\w]*\.)*(?:[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Warning)|Failed)\b(?::|$)"
)
# pytest's location line under a trace: `test/test_x.py:15: AssertionError`.
_LOCATION = re.compile(r"^\S+:\d+: \S")
# pytest's error lines: `E       AssertionError: …`.
_E_LINE = re.compile(r"^E(?:\s|$)")


def error_line_index(lines: Sequence[str]) -> int | None:
    """Which of a trace's lines is its error: the line a person reads first.

    Read from the end, as `classify` reads: the last block of pytest's `E` lines gives its
    first line naming an exception (else its first line); a plain traceback, its last line
    naming one; else pytest's location line (`path:line: Error`); else the last line that
    is not a frame's local (`self = <…>`). None for a trace without a line.
    """
    block_end = None
    for n in range(len(lines) - 1, -1, -1):
        if _E_LINE.match(lines[n]):
            block_end = n
            break
    if block_end is not None:
        start = block_end
        while start > 0 and _E_LINE.match(lines[start - 1]):
            start -= 1
        block = range(start, block_end + 1)
        named = [n for n in block if _EXCEPTION.match(lines[n][1:].strip())]
        filled = [n for n in block if lines[n][1:].strip()]
        return (named or filled or [start])[0]
    for pattern in (_EXCEPTION, _LOCATION):
        for n in range(len(lines) - 1, -1, -1):
            if pattern.match(lines[n].strip()):
                return n
    for n in range(len(lines) - 1, -1, -1):
        text = lines[n].strip()
        if text and not re.match(r"^\w+ = ", text):
            return n
    return None


def is_error_line(line: str) -> bool:
    """Whether a line of pytest's output is an `E` line naming an exception."""
    return bool(_E_LINE.match(line) and _EXCEPTION.match(line[1:].strip()))


def error_line(text: str) -> str:
    """A failure's error line (`error_line_index`), without pytest's `E` prefix."""
    lines = text.splitlines()
    n = error_line_index(lines)
    if n is None:
        return ""
    line = lines[n]
    return (line[1:] if _E_LINE.match(line) else line).strip()


def classify(
    message: str, traceback: str = "", rules: Sequence[Rule] | None = None
) -> Classification:
    """Classify a failure from its message and traceback, reading from the end."""
    rules = default_rules() if rules is None else rules
    for line in reversed(_readable_lines(f"{message}\n{traceback}")):
        for rule in rules:
            for pattern in rule.patterns:
                match = pattern.search(line)
                if match:
                    return _result(rule, match, line.strip())
    return Classification(Category.OTHER)


def _result(rule: Rule, match: re.Match[str], line: str) -> Classification:
    groups = match.groupdict()
    op = overload = None
    if groups.get(rule.op_group):
        op, overload = split_op(groups[rule.op_group])
    dtype = groups.get(rule.dtype_group)
    if dtype:
        dtype = SCALAR_TYPES.get(dtype, dtype)
    return Classification(rule.category, rule.name, line, op, overload, dtype)


def split_op(qualified: str) -> tuple[str, str]:
    """`aten::add.Tensor` -> (`add`, `add.Tensor`); other namespaces are kept."""
    namespace, _, name = qualified.rpartition("::")
    if namespace and namespace != "aten":
        name = f"{namespace}::{name}"
    return name.split(".", 1)[0], name


# --- verdicts ------------------------------------------------------------------------


class Verdict(StrEnum):
    REGRESSION = "regression"
    FLAKY = "flaky"
    KNOWN = "known"
    INFRA = "infra"


class LastGreen(StrEnum):
    """The test's outcome in the job's last green run."""

    PASSED = "passed"
    FAILED = "failed"
    ABSENT = "absent"  # the job has a green run, without this test
    NO_GREEN_RUN = "no green run"  # the job has no green run to compare with


@dataclass(frozen=True)
class VerdictResult:
    verdict: Verdict
    reason: str
    issue_url: str | None = None


def decide_verdict(
    category: Category | str,
    *,
    last_green: LastGreen | str,
    passed_on_retry: bool = False,
    disabled: DisabledTest | None = None,
    infra_timeout: bool = False,
) -> VerdictResult:
    """What a failure means for the job, checked in this order:

    1. `infra`: the category is infra, or a timeout that hit the shard or the worker
       rather than this test alone (`infra_timeout`);
    2. `flaky`: it passed when re-run alone;
    3. `known`: PyTorch has disabled the test (the issue is carried along);
    4. `known`: it already failed in the job's last green run;
    5. `regression`: it passed there, or it was not there (a new test has no
       baseline that excuses its failure), or the job has no green run yet.
    """
    category, last_green = Category(category), LastGreen(last_green)
    if category is Category.INFRA:
        return VerdictResult(Verdict.INFRA, "the failure came from the infrastructure")
    if category is Category.TIMEOUT and infra_timeout:
        return VerdictResult(Verdict.INFRA, "the shard or worker timed out, not this test")
    if passed_on_retry:
        return VerdictResult(Verdict.FLAKY, "it passed when re-run alone")
    if disabled is not None:
        return VerdictResult(
            Verdict.KNOWN, f"PyTorch disabled it in issue {disabled.issue}", disabled.issue_url
        )
    if last_green is LastGreen.FAILED:
        return VerdictResult(Verdict.KNOWN, "it already failed in the last green run")
    if last_green is LastGreen.PASSED:
        return VerdictResult(Verdict.REGRESSION, "it passed in the last green run")
    if last_green is LastGreen.NO_GREEN_RUN:  # the run's attribution says the same
        return VerdictResult(Verdict.REGRESSION, "the job has no earlier green run to excuse it")
    return VerdictResult(Verdict.REGRESSION, "it is new since the last green run")


def makes_run_red(verdicts: Iterable[Verdict | VerdictResult | str]) -> bool:
    """Only a regression makes a job red; flaky, known and infra failures never do."""
    return any(
        Verdict(v.verdict if isinstance(v, VerdictResult) else v) is Verdict.REGRESSION
        for v in verdicts
    )


# --- PyTorch's disabled tests --------------------------------------------------------


@dataclass(frozen=True)
class DisabledTest:
    test: str
    test_class: str
    issue: str
    issue_url: str
    platforms: frozenset[str]

    def applies_to(self, platform: str) -> bool:
        return not self.platforms or platform in self.platforms


_ENTRY = re.compile(r"^(?P<test>\S+) \((?P<module>[\w.]+)\.(?P<cls>\w+)\)$")
UPSTREAM_DEVICES = ("cpu", "cuda", "mps", "xpu", "meta", "hpu", "mtia", "lazy", "xla")


def parse_disabled_tests(data: Mapping[str, Any]) -> list[DisabledTest]:
    """Entries of `{"test_x (__main__.TestFoo)": [issue, url, [platforms]]}`."""
    if not isinstance(data, Mapping):
        raise ValueError("disabled tests: expected an object")
    entries = []
    for key, value in data.items():
        match = _ENTRY.match(key)
        valid = isinstance(value, list) and len(value) == 3 and isinstance(value[2], list)
        if not match or not valid:
            raise ValueError(f"disabled tests: malformed entry {key!r}")
        issue, url, platforms = value
        entries.append(
            DisabledTest(
                match["test"], match["cls"], str(issue), str(url), frozenset(map(str, platforms))
            )
        )
    return entries


class DisabledTests:
    """PyTorch's disabled tests that apply to one platform, looked up by our names."""

    def __init__(
        self,
        entries: Iterable[DisabledTest],
        *,
        platform: str = "linux",
        backend: str = "privateuseone",
    ) -> None:
        self.devices = {d.upper(): d for d in (*UPSTREAM_DEVICES, backend)}
        # Class names flip between …PRIVATEUSE1 and …PRIVATEUSEONE (DESIGN §3).
        self.devices["PRIVATEUSE1"] = backend
        self.suffixes = sorted(self.devices, key=len, reverse=True)  # longest first
        self.exact: dict[tuple[str, str], DisabledTest] = {}
        self.generic: dict[tuple[str, str], DisabledTest] = {}
        for entry in entries:
            if not entry.applies_to(platform):
                continue
            self.exact.setdefault((entry.test, entry.test_class), entry)
            if key := self.generic_key(entry.test, entry.test_class):
                self.generic.setdefault(key, entry)

    def __len__(self) -> int:
        return len(self.exact)

    def generic_key(self, test: str, test_class: str) -> tuple[str, str] | None:
        """(generic test, generic class) for a device-generated test, else None."""
        for suffix in self.suffixes:
            if test_class.endswith(suffix) and len(test_class) > len(suffix):
                device = self.devices[suffix]
                # The device goes after the test name, before dtype or other suffixes.
                head, sep, tail = test.rpartition(f"_{device}")
                if sep and (not tail or tail.startswith("_")):
                    test = head + tail
                return test, test_class[: -len(suffix)]
        return None

    def lookup(self, test: str, test_class: str) -> DisabledTest | None:
        found = self.exact.get((test, test_class))
        if found is None and (key := self.generic_key(test, test_class)):
            found = self.generic.get(key)
        return found


def load_disabled_tests(
    path: Path, *, platform: str = "linux", backend: str = "privateuseone"
) -> DisabledTests:
    entries = parse_disabled_tests(json.loads(path.read_text()))
    return DisabledTests(entries, platform=platform, backend=backend)
