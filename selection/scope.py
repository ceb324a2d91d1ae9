"""Stage 1, the coarse filter: which test files are worth analysing for a backend.

Two inputs from the backend profile:
- its hooked extension points (`eager`, `autograd`, `dynamo`, `inductor`,
  `distributed`, …): an area of the tree the backend does not hook (the test
  files of dynamo, distributed, …) is left out whole, with that reason; files that
  test another device (`test_cuda.py`, `test_mps.py`, …) are always left out;
- its scope preference in plain words ("no autograd yet; skip distributed and
  compiled tests"): each clause is negative (no, skip, without, exclude, not) or
  positive (only, just, focus on); its subject is matched against area names and
  their keywords, and (when embeddings exist) against file summaries by meaning.
  Negative clauses also leave out single tests whose names say the subject
  (`test_fn_grad` under "no autograd").
Every exclusion carries its reason.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

# area -> (extension point it needs, path fragments, keywords people use for it)
AREAS: dict[str, tuple[str | None, tuple[str, ...], tuple[str, ...]]] = {
    "distributed": (
        "distributed",
        ("test/distributed/", "test_c10d", "test_distributed", "test_fsdp", "test_ddp"),
        ("distributed", "c10d", "ddp", "fsdp", "collective", "collectives", "multi-process"),
    ),
    "dynamo": (
        "dynamo",
        ("test/dynamo/", "test_dynamo", "test/dynamo_expected_failures/"),
        ("dynamo", "compile", "compiled", "torch.compile", "graph capture"),
    ),
    "inductor": (
        "inductor",
        ("test/inductor/", "test_inductor", "test_torchinductor", "test_compile"),
        ("inductor", "compile", "compiled", "torch.compile", "codegen", "triton"),
    ),
    "export": ("export", ("test/export/", "test_export"), ("export", "torch.export")),
    "autograd": (
        "autograd",
        ("test_autograd", "test/autograd/", "test_functional_autograd"),
        ("autograd", "gradient", "gradients", "backward", "gradcheck", "grad"),
    ),
    "jit": ("jit", ("test/jit/", "test_jit"), ("jit", "torchscript", "script")),
    "onnx": ("onnx", ("test/onnx/", "test_onnx"), ("onnx",)),
    "quantization": (
        "quantization",
        ("test/quantization/", "test_quantization", "test_quantized"),
        ("quantization", "quantized", "int8 quantization"),
    ),
    "profiler": ("profiler", ("test/profiler/", "test_profiler"), ("profiler", "profiling")),
    "sparse": ("sparse", ("test_sparse",), ("sparse",)),
    "other_device": (
        None,
        (
            "test_cuda",
            "test_mps",
            "test_xpu",
            "test_cudnn",
            "test_rocm",
            "test/xpu/",
            "test_mkldnn",
        ),
        ("cuda", "mps", "xpu", "rocm"),
    ),
}
DEFAULT_AREA = "eager"
# Parts of a test name that say which area a single test belongs to.
TEST_NAME_HINTS = {
    "autograd": ("grad", "backward", "autograd"),
    "distributed": ("distributed", "ddp", "c10d"),
    "dynamo": ("compile", "dynamo"),
    "inductor": ("compile", "inductor"),
}
NEGATIVE = re.compile(r"^(no|skip|skipping|without|exclude|excluding|not|ignore|drop|leave out)\b")
POSITIVE = re.compile(r"^(only|just|focus on|limit to)\b")
FILLER = re.compile(r"\b(yet|for now|tests?|please|the|any|at all|for the moment|area)\b")
# Cosine similarity above which a file summary is taken to be about a clause's subject.
MEANING_THRESHOLD = 0.45


def area_of(path: str) -> str:
    for area, (_, fragments, _) in AREAS.items():
        if any(fragment in path for fragment in fragments):
            return area
    return DEFAULT_AREA


@dataclass(frozen=True)
class Clause:
    text: str
    negative: bool
    subject: str
    areas: tuple[str, ...]


def clauses(preference: str) -> list[Clause]:
    """Split a plain-words preference into clauses with a direction and a subject."""
    out = []
    for raw in re.split(r"[;,.\n]|\band\b(?=\s*(?:no|skip|without|only|exclude)\b)", preference):
        text = " ".join(raw.lower().split())
        if not text:
            continue
        negative = bool(NEGATIVE.match(text))
        positive = bool(POSITIVE.match(text))
        if not (negative or positive):
            continue
        subject = (NEGATIVE if negative else POSITIVE).sub("", text)
        subject = " ".join(FILLER.sub(" ", subject).split())
        words = set(re.split(r"[\s/]+|\band\b", subject)) | {subject}
        areas = tuple(
            area
            for area, (_, _, keywords) in AREAS.items()
            if any(keyword in words or keyword == subject for keyword in keywords)
        )
        out.append(Clause(raw.strip(), negative, subject, areas))
    # "skip distributed and compiled tests": one clause, several subjects.
    return out


@dataclass
class FileInfo:
    path: str
    summary: str = ""
    embedding: bytes | None = None
    tests: list[str] = field(default_factory=list)


@dataclass
class CoarseResult:
    included: list[str] = field(default_factory=list)
    excluded: dict[str, str] = field(default_factory=dict)
    excluded_tests: dict[tuple[str, str, str], str] = field(default_factory=dict)

    def as_dict(self) -> dict[str, object]:
        return {
            "included": self.included,
            "excluded": self.excluded,
            "excluded_tests": {"::".join(k): v for k, v in self.excluded_tests.items()},
        }


def coarse_filter(
    files: Sequence[FileInfo],
    extension_points: Sequence[str],
    preference: str,
    test_keys: Sequence[tuple[str, str, str]] = (),
    meaning: dict[str, dict[str, float]] | None = None,
) -> CoarseResult:
    """Choose the files to analyse; `meaning[subject][path]` is the similarity of each file
    summary to a clause's subject (from embeddings), when the caller has them."""
    hooked = {point.strip().lower() for point in extension_points}
    if hooked & {"compile", "torch.compile"}:
        hooked |= {"dynamo", "inductor"}
    parsed = clauses(preference)
    result = CoarseResult()
    for info in files:
        reason = _area_reason(info.path, hooked) or _clause_reason(info, parsed, meaning or {})
        if reason:
            result.excluded[info.path] = reason
        else:
            result.included.append(info.path)
    included = set(result.included)
    for key in test_keys:
        if key[0] in included:
            reason = _test_reason(key, parsed)
            if reason:
                result.excluded_tests[key] = reason
    return result


def _area_reason(path: str, hooked: set[str]) -> str:
    area = area_of(path)
    needed = AREAS[area][0] if area in AREAS else None
    if area == "other_device":
        return "tests another device's own features (CUDA, MPS, XPU, …), not a privateuse1 backend"
    if needed is not None and needed not in hooked:
        points = ", ".join(sorted(hooked)) or "none"
        return f"a {area} test file, and the backend does not hook {needed} (extension points: {points})"
    return ""


def _clause_reason(
    info: FileInfo, parsed: list[Clause], meaning: dict[str, dict[str, float]]
) -> str:
    area = area_of(info.path)
    for clause in parsed:
        score = meaning.get(clause.subject, {}).get(info.path, 0.0)
        about = area in clause.areas or score >= MEANING_THRESHOLD
        if clause.negative and about:
            why = (
                f"a {area} test file"
                if area in clause.areas
                else (f'its summary matches "{clause.subject}" (similarity {score:.2f})')
            )
            return f'scope preference "{clause.text}": {why}'
        if not clause.negative and not about:
            return f'scope preference "{clause.text}": not about {clause.subject}'
    return ""


def _test_reason(key: tuple[str, str, str], parsed: list[Clause]) -> str:
    name = key[2].lower()
    for clause in parsed:
        if not clause.negative:
            continue
        for area in clause.areas:
            hints = TEST_NAME_HINTS.get(area, ())
            hit = next((h for h in hints if re.search(rf"(^|_){h}(_|$|s_|s$)", name)), None)
            if hit:
                return f'scope preference "{clause.text}": the test name says {area} ("{hit}")'
    return ""
