"""Run every benchmark and print one table of its figures against their targets.

    .venv/bin/python bench/run_all.py [--only ingest,pages] [--skip selection_quality] [--fresh]

Each script runs in its own process with this environment (set DATABASE_URL,
TORCH_ROOT and the rest as the script's section of bench/README.md says) and
prints its figures as lines of the form `label: value (target <= bound)`; this
collects those lines. A PostgreSQL database that DATABASE_URL names is created
when missing (`--fresh`: dropped and created anew, so the figures do not depend
on what earlier runs left). A script that fails before printing a figure shows
as such. Exit status: 0 when every figure meets its target.
"""

import argparse
import os
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

BENCH = Path(__file__).resolve().parent
# In the order they are cheapest to run; upstream_check is a check, not a figure.
SCRIPTS = [
    "sharding", "ingest", "intake", "pages", "pages_at_scale", "collection", "opcapture",
    "upgrade", "selection_quality", "bigtree", "selection_scale", "first_test", "shard_cost",
    "bundles_scale",
]  # fmt: skip
FIGURE = re.compile(
    r"^(?P<label>[^\n]*?):?\s+(?:\d+/\d+ = )?(?P<value>-?[\d.]+)(?P<unit>%|x)?\s*"
    r"\(target (?P<op><=|>=) (?P<bound>-?[\d.]+)(?P<bound_unit>%|x)?"
)


@dataclass
class Figure:
    script: str
    label: str
    value: float
    op: str
    bound: float
    unit: str

    @property
    def met(self) -> bool:
        return self.value <= self.bound if self.op == "<=" else self.value >= self.bound


def figures(script: str, output: str) -> list[Figure]:
    found = []
    for line in output.splitlines():
        match = FIGURE.match(line.strip())
        if match:
            label = match["label"].strip().rstrip("=:").strip()
            found.append(
                Figure(script, label, float(match["value"]), match["op"],
                       float(match["bound"]), match["unit"] or match["bound_unit"] or "")
            )  # fmt: skip
    return found


def prepare_database(fresh: bool) -> str:
    """Create the PostgreSQL database DATABASE_URL names when it is missing (anew with
    `fresh`); what was done, for the table's header."""
    url = os.environ.get("DATABASE_URL", "")
    if not url.startswith(("postgres://", "postgresql://")):
        return "each script's own SQLite file" if not url else url.split(":", 1)[0]
    import psycopg
    from psycopg import sql

    name = urlsplit(url).path.lstrip("/")
    server = urlsplit(url)._replace(path="/postgres").geturl()
    with psycopg.connect(server, autocommit=True) as connection:
        if fresh:
            connection.execute(
                sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name))
            )
        found = connection.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
        if found.fetchone():
            return f"PostgreSQL database {name} (as earlier runs left it)"
        connection.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    return f"PostgreSQL database {name}, created for this run"


def run(script: str) -> tuple[list[Figure], str, float]:
    started = time.monotonic()
    completed = subprocess.run(
        [sys.executable, str(BENCH / f"{script}.py")],
        cwd=BENCH.parent,
        env=os.environ.copy(),
        capture_output=True,
        text=True,
    )
    seconds = time.monotonic() - started
    output = completed.stdout + completed.stderr
    found = figures(script, completed.stdout)
    if not found:
        tail = output.strip().splitlines()[-1:] or ["no output"]
        return [], f"exit {completed.returncode}: {tail[0][:100]}", seconds
    return found, "", seconds


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default="", help="comma-separated script names")
    parser.add_argument("--skip", default="", help="comma-separated script names")
    parser.add_argument(
        "--fresh", action="store_true", help="drop and create DATABASE_URL's database first"
    )
    options = parser.parse_args()
    print(f"database: {prepare_database(options.fresh)}", file=sys.stderr)
    chosen = [s for s in SCRIPTS if not options.only or s in options.only.split(",")]
    chosen = [s for s in chosen if s not in options.skip.split(",")]
    rows: list[Figure] = []
    broken: list[tuple[str, str]] = []
    for index, script in enumerate(chosen, 1):
        print(f"[{index}/{len(chosen)}] {script} …", end="", flush=True, file=sys.stderr)
        found, error, seconds = run(script)
        print(f" {seconds:.0f} s", file=sys.stderr)
        rows.extend(found)
        if error:
            broken.append((script, error))
    width = max([len(f"{r.script}: {r.label}") for r in rows] + [20])
    print(f"\n{'figure':<{width}}  {'value':>10}  {'target':>10}  met")
    for row in rows:
        name = f"{row.script}: {row.label}"
        value, bound = f"{row.value:g}{row.unit}", f"{row.op} {row.bound:g}{row.unit}"
        print(f"{name:<{width}}  {value:>10}  {bound:>10}  {'yes' if row.met else 'NO'}")
    for script, error in broken:
        print(f"{script + ': did not run':<{width}}  {error}")
    return 0 if rows and all(r.met for r in rows) and not broken else 1


if __name__ == "__main__":
    sys.exit(main())
