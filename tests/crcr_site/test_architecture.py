"""The layout's rules, read from the source: a one-way app graph, small modules, one launcher.

Imports are counted wherever they stand in a module (inside functions too), so
a lazy import cannot hide a cycle.
"""

import ast
import re
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# The engine (its own package, engine/crcr_reuse) is the bottom node of the graph.
ENGINE = "engine/crcr_reuse"
PARTS = ("crcr_reuse", "crcr_site", "runs", "selection", "reproducibility", "demo")
APPS = ("crcr_site", "runs", "selection", "reproducibility", "demo")
PACKAGES = (ENGINE, *APPS, "bench")
LAUNCHER = "engine/crcr_reuse/launcher.py"
# The bundle's stand-alone script runs with the standard library alone.
STANDALONE = "reproducibility/reproduce.py"
PYTEST_OPTION = re.compile(r"^--(reuse-[a-z-]+|junitxml|crcr-progress|opcapture-[a-z]+)=")
MAX_LINES = 500


def modules(*packages: str) -> list[Path]:
    return sorted(
        path
        for package in packages
        for path in (ROOT / package).rglob("*.py")
        if "migrations" not in path.parts
    )


def part_of(module: str) -> str | None:
    return next((p for p in PARTS if module == p or module.startswith(f"{p}.")), None)


def module_name(path: Path) -> str:
    """The dotted name `path` is imported as (the engine's folder is not part of it)."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[1:] if parts[0] == "engine" else parts)


def imported(path: Path) -> list[str]:
    """Every module `path` imports, anywhere in it, relative imports resolved."""
    own = module_name(path).split(".")
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = own[: -node.level] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            names += [module] + [f"{module}.{alias.name}" for alias in node.names]
    return names


def app_graph() -> dict[str, dict[str, set[str]]]:
    """part -> imported part -> the files that import it."""
    graph: dict[str, dict[str, set[str]]] = defaultdict(lambda: defaultdict(set))
    for path in modules(ENGINE, *APPS):
        source = part_of(module_name(path))
        assert source is not None
        for name in imported(path):
            target = part_of(name)
            if target is not None and target != source:
                graph[source][target].add(str(path.relative_to(ROOT)))
    return graph


def cycle_in(graph: dict[str, dict[str, set[str]]]) -> list[str]:
    """One cycle of the graph as a path of parts, or [] when there is none."""
    state: dict[str, str] = {}

    def visit(node: str, trail: list[str]) -> list[str]:
        state[node] = "open"
        for nxt in graph.get(node, {}):
            if state.get(nxt) == "open":
                return [*trail[trail.index(nxt) :], node, nxt] if nxt in trail else [node, nxt]
            if nxt not in state and (found := visit(nxt, [*trail, node])):
                return found
        state[node] = "done"
        return []

    for start in list(graph):
        if start not in state and (found := visit(start, [])):
            return found
    return []


def test_the_apps_import_each_other_one_way_only():
    graph = app_graph()
    cycle = cycle_in(graph)
    detail = {f"{a} -> {b}": sorted(graph[a][b]) for a, b in zip(cycle, cycle[1:], strict=False)}
    assert not cycle, f"import cycle {' -> '.join(cycle)}: {detail}"
    # The edges the README draws; a new one is a decision to write down there.
    edges = {(a, b) for a in graph for b in graph[a]}
    assert edges <= {
        ("runs", "crcr_site"),
        ("runs", "crcr_reuse"),
        ("selection", "crcr_site"),
        ("selection", "runs"),
        ("selection", "crcr_reuse"),
        ("reproducibility", "crcr_site"),
        ("reproducibility", "runs"),
        ("reproducibility", "selection"),
        ("reproducibility", "crcr_reuse"),
        ("demo", "runs"),
        ("demo", "selection"),
        ("demo", "reproducibility"),
        ("demo", "crcr_site"),
        ("demo", "crcr_reuse"),
    }, sorted(edges)


def test_the_engine_imports_neither_django_nor_the_rest_of_crcr():
    for path in modules(ENGINE):
        outside = [
            name
            for name in imported(path)
            if name.split(".")[0] in ("django", "rest_framework", "celery", *APPS, "bench")
        ]
        assert not outside, f"{path.relative_to(ROOT)} imports {outside}"


def test_no_module_is_over_the_line_budget():
    long = {
        str(path.relative_to(ROOT)): lines
        for path in modules(*PACKAGES)
        if (lines := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert not long, f"over {MAX_LINES} lines: {long}"


def pytest_command_parts(path: Path) -> list[str]:
    """Where `path` spells a pytest command itself: `-m pytest`, `pytest.main`, or an
    option of the plugins crcr passes on a command line (`--reuse-config=…`)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.List | ast.Tuple):
            values = [e.value if isinstance(e, ast.Constant) else None for e in node.elts]
            if any(a == "-m" and b == "pytest" for a, b in zip(values, values[1:], strict=False)):
                found.append(f"line {node.lineno}: -m pytest")
        elif isinstance(node, ast.Attribute) and node.attr == "main":
            if isinstance(node.value, ast.Name) and node.value.id == "pytest":
                found.append(f"line {node.lineno}: pytest.main")
        elif isinstance(node, ast.JoinedStr) and node.values:
            head = node.values[0]
            if isinstance(head, ast.Constant) and PYTEST_OPTION.match(str(head.value)):
                found.append(f"line {node.lineno}: {head.value}")
    return found


def test_exactly_one_module_builds_pytest_command_lines():
    builders = {
        str(path.relative_to(ROOT)): parts
        for path in modules(*PACKAGES)
        if (parts := pytest_command_parts(path))
    }
    assert builders.pop(LAUNCHER, None), "the launcher no longer builds the command"
    builders.pop(STANDALONE, None)
    assert not builders, f"pytest command lines built outside {LAUNCHER}: {builders}"
