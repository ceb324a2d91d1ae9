"""Bench: how right the selection pipeline's proposals are, measured on the device.

    .venv/bin/python bench/selection_quality.py [--op lgamma]
    TORCH_ROOT=/folder/holding/test .venv/bin/python bench/selection_quality.py --file test_torch.py

With --file, the tree is a scratch copy holding only that file of $TORCH_ROOT's test/
(and its conftest), so each real file is measured on its own; the targets are then
issue 34's: precision 100 %, recall >= 95 %. Ground truth runs every device variant
of the file up to --limit (5,000); over it, a fixed random sample of --sample (2,000)
variants drawn with --seed (34, printed), and the verification runs the decisions'
variants within that sample: every figure is then over the sample. A test none of whose
drawn variants its decision keeps (none drawn, or only OpInfos it drops) is outside the
sample; one whose decision keeps no variant at all fails precision ("nothing ran").

On the bundled upstream-style tree (or $TORCH_ROOT) with the reference device
(its default operator set, the tree's planted faults, a fresh flaky counter),
in a throwaway SQLite database:
1. the pipeline runs stages 1-4 for a reference backend (parent config: the
   tree's `crcr-config.yaml`);
2. ground truth: every test of the tree runs on the device, all as
   `mandatory_success` under the same global section;
3. verification: a config holding exactly the pipeline's decisions runs on the device.
Printed, per generic test and per generated variant:
- precision: of the tests proposed `mandatory_success`, the share that pass in
  the verification run (target >= 99 %);
- recall: of the tests that pass on the device in the ground truth, the share
  proposed `mandatory_success` (target >= 90 %).
Then use case A: enabling `--op` lists the tests waiting on it from the index,
and the bench checks, with its own device runs, that the proposals are exactly
the waiting tests that pass once the op is enabled (and fail without it).
With --decisions F (written by `real_run.py --decisions F` on the same file), the
pipeline does not run again: those decisions are measured (use case A is then left out,
as it needs the pipeline's operator index).
Also printed: the PTS-style figure, the share of the device's failing variants that
the config still runs (any mode but skip) against the share of all variants it runs.
Exit status 1 when a target is missed.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
SCRATCH = Path(tempfile.mkdtemp(prefix="crcr-quality-"))
os.environ.pop("DATABASE_URL", None)
os.environ.pop("CELERY_BROKER_URL", None)
os.environ.update(
    CRCR_VAR_DIR=str(SCRATCH), DEBUG="true", DJANGO_SETTINGS_MODULE="crcr_site.settings"
)
os.environ["CRCR_FLAKY_COUNTER"] = str(SCRATCH / "flaky-counter")
PRECISION, RECALL = 0.99, 0.90
FILE_PRECISION, FILE_RECALL = 1.0, 0.95  # issue 34's targets for one real file

import django  # noqa: E402

django.setup()

from crcr_reuse.outcomes import TestRecord, canonical  # noqa: E402
from django.core.management import call_command  # noqa: E402

from runs.models import Backend  # noqa: E402
from selection import configwriter, enabling, pipeline, refine  # noqa: E402
from selection.capabilities import for_backend  # noqa: E402
from selection.models import ConfigVersion, Proposal  # noqa: E402
from selection.progress import Bar  # noqa: E402

Key = tuple[str, str, str]


def device_ids(tree: Path, text: str, backend: Backend, caps, tag: str):
    """The pytest process running `text` on the device, and the variant ids it selects."""
    pytest = refine.device_pytest(tree, text, backend.device_module, caps, SCRATCH / tag)
    ids, broken = refine.collect(pytest)
    return pytest, [canonical(i) for i in ids], broken


def device_outcomes(
    tree: Path, text: str, backend: Backend, caps, tag: str, keep=None, collected=None
):
    """Per generic test: its variants' (node id, outcome, flaky); with `keep`, only the
    variants in it run; `collected`: what `device_ids` already answered for `text`."""
    pytest, ids, records = collected or device_ids(tree, text, backend, caps, tag)
    ids = [i for i in ids if keep is None or i in keep]
    if ids:
        records += refine.run_ids(pytest, ids, SCRATCH / tag / "shard", progress=Bar())
    final: dict[str, refine.TestRecord] = {}
    for record in sorted(records, key=lambda r: r.attempt):
        final[record.node_id] = record
    per_test: dict[Key, list[tuple[str, str, bool]]] = {}
    for node_id, record in final.items():
        key = refine.generic_key(record, tree, KNOWN)
        flaky = any(r.node_id == node_id and r.attempt > 1 for r in records)
        per_test.setdefault(key, []).append((node_id, record.outcome, flaky))
    return per_test


# Outcomes that are no failure: a variant upstream itself skips (`skipTest`, `@skipIf`,
# an expected failure) does so on every device; real files have many (test_reductions).
NEUTRAL = ("passed", "skipped", "xfailed")


def passing(rows: list[tuple[str, str, bool]]) -> bool:
    """The test passes on the device: a variant passed, and none failed or was flaky."""
    return any(outcome == "passed" for _, outcome, _ in rows) and all(
        outcome in NEUTRAL and not flaky for _, outcome, flaky in rows
    )


KNOWN: list[Key] = []


def as_key(text: str) -> Key:
    path, cls, name = text.split("::")
    return (path, cls, name)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--op", default="lgamma", help="the operator use case A enables")
    parser.add_argument("--file", help="measure this one file of $TORCH_ROOT/test alone")
    parser.add_argument(
        "--limit", type=int, default=5000, help="a file over this many device variants is sampled"
    )
    parser.add_argument("--sample", type=int, default=2000, help="variants a sample holds")
    parser.add_argument("--seed", type=int, default=34, help="the sample's random seed")
    parser.add_argument("--no-op", action="store_true", help="leave use case A out")
    parser.add_argument(
        "--decisions", type=Path, help="measure these decisions (real_run.py --decisions F)"
    )
    args = parser.parse_args()
    args.no_op = args.no_op or args.decisions is not None
    started = time.monotonic()
    global PRECISION, RECALL
    tree = Path(os.environ.get("TORCH_ROOT") or ROOT / "tests" / "upstream").resolve()
    if args.file:
        import bigtree

        source = tree
        tree = bigtree.start_tree(source, SCRATCH / "tree")
        shutil.copy(source / "test" / args.file, tree / "test" / args.file)
        PRECISION, RECALL = FILE_PRECISION, FILE_RECALL
    call_command("migrate", verbosity=0)
    parent = (
        (tree / "crcr-config.yaml").read_text()
        if (tree / "crcr-config.yaml").exists()
        else ("test_suite_config:\n  files: []\n")
    )
    backend = Backend.objects.create(
        slug="reference", name="Reference device", repository="crcr/reference",
        device_module="crcr_reuse.reference_device", extension_points=["eager"],
        scope_preference="no autograd yet; skip distributed and compiled tests",
    )  # fmt: skip
    ConfigVersion.objects.create(
        backend=backend, number=1, yaml_text=parent, sha256=ConfigVersion.hash_text(parent)
    )
    print(f"tree {tree}; scratch {SCRATCH}")
    if args.decisions:
        summary = json.loads(args.decisions.read_text())
        print(f"pipeline: {len(summary['decisions'])} decisions read from {args.decisions}")
    else:
        summary = pipeline.run_for_backend(backend, tree, progress=Bar()).summary
        print(
            f"\npipeline: {len(summary['decisions'])} decisions in {sum(summary['seconds'].values()):.0f} s"
        )
    decisions = {as_key(d["test"]): d for d in summary["decisions"]}
    KNOWN.extend(decisions)
    caps = for_backend(parent, backend.device_module)

    files = sorted({key[0] for key in decisions} | set(summary["stage1"]["excluded"]))
    every_test = configwriter.every_test(parent, files)
    collected = device_ids(tree, every_test, backend, caps, "truth")
    every_id = collected[1]
    keep = None
    if len(every_id) > args.limit:
        keep = set(random.Random(args.seed).sample(sorted(every_id), args.sample))
        print(
            f"ground truth: a fixed random sample of {len(keep)} of {len(every_id)} device "
            f"variants (seed {args.seed}); every figure below is over it"
        )
    else:
        print(f"ground truth: every one of the {len(every_id)} device variants")
    truth = device_outcomes(tree, every_test, backend, caps, "truth", keep, collected)
    text = configwriter.standalone(parent, pipeline.config_decisions(decisions.values()))
    kept = device_ids(tree, text, backend, caps, "verify")
    verified = device_outcomes(tree, text, backend, caps, "verify", keep, kept)

    mandatory = [key for key, d in decisions.items() if d["mode"] == "mandatory_success"]
    if keep is not None:
        # Outside the sample: a test none of whose variants was drawn, or none of whose
        # drawn variants its decision keeps (it drops those OpInfos); a test the config
        # keeps no variant of at all stays in, and fails ("nothing ran").
        anywhere = {refine.generic_key(TestRecord(i, ""), tree, KNOWN) for i in kept[1]}
        outside = [
            key
            for key in mandatory
            if key not in truth or (key in anywhere and key not in verified)
        ]
        dropped = sum(key in truth for key in outside)
        mandatory = [key for key in mandatory if key not in outside]
        print(
            f"{len(outside)} mandatory_success tests have no variant in the sample "
            f"({dropped} of them only variants their decision drops)"
        )
    good = [key for key in mandatory if passing(verified.get(key, []))]
    passes = [key for key, rows in truth.items() if passing(rows)]
    recalled = [key for key in passes if decisions.get(key, {}).get("mode") == "mandatory_success"]
    precision = len(good) / len(mandatory) if mandatory else 1.0
    recall = len(recalled) / len(passes) if passes else 1.0
    # Variant level: node ids, device-suffix spelling normalised by the executor.
    run_ids = {n for key in mandatory for n, _, _ in verified.get(key, [])}
    ok_ids = {
        n for key in mandatory for n, o, f in verified.get(key, []) if o == "passed" and not f
    }
    truth_ids = {n for rows in truth.values() for n, o, f in rows if o == "passed" and not f}
    v_precision = len(ok_ids) / len(run_ids) if run_ids else 1.0
    v_recall = len(truth_ids & run_ids) / len(truth_ids) if truth_ids else 1.0
    print(
        f"precision (generic tests): {len(good)}/{len(mandatory)} = {precision:.1%} (target >= {PRECISION:.0%})"
    )
    print(
        f"recall    (generic tests): {len(recalled)}/{len(passes)} = {recall:.1%} (target >= {RECALL:.0%})"
    )
    print(f"precision (variants):      {len(ok_ids)}/{len(run_ids)} = {v_precision:.1%}")
    print(
        f"recall    (variants):      {len(truth_ids & run_ids)}/{len(truth_ids)} = {v_recall:.1%}"
    )
    # PTS-style: failures the config would still see, against the variants it runs.
    running = [key for key, d in decisions.items() if d["mode"] != "skip"]
    ran = {n for key in running for n, _, _ in verified.get(key, [])}
    every = {n for rows in truth.values() for n, _, _ in rows}
    failing = {n for rows in truth.values() for n, o, f in rows if o not in NEUTRAL or f}
    caught = failing & ran
    print(
        f"PTS-style: {len(caught)}/{len(failing)} device-failing variants run "
        f"({len(caught) / len(failing) if failing else 1.0:.1%}) while running "
        f"{len(ran)}/{len(every)} variants ({len(ran) / len(every) if every else 1.0:.1%})"
    )
    for key in sorted(set(mandatory) - set(good)):
        bad = [row for row in verified.get(key, []) if row[1] not in NEUTRAL or row[2]]
        print(f"  proposed mandatory but fails: {'::'.join(key)}: {bad[:3] or 'nothing ran'}")
    for key in sorted(set(passes) - set(recalled)):
        d = decisions.get(key, {})
        print(
            f"  passes but proposed {d.get('mode', 'nothing')}: {'::'.join(key)}: {d.get('reason', '')}"
        )

    exact = True if args.no_op else use_case_a(backend, tree, args.op, caps)
    print(f"total {time.monotonic() - started:.0f} s")
    return 0 if precision >= PRECISION and recall >= RECALL and exact else 1


def use_case_a(backend: Backend, tree: Path, op: str, caps) -> bool:
    enabled = enabling.enable_operator(backend, op, tree)
    waiting = [as_key(t) for t in enabled.summary["waiting"]]
    proposed = {
        (p.file_path, p.class_name, p.test_name)
        for p in Proposal.objects.filter(selection_run=enabled)
    } | {tuple(t.split("::")) for t in enabled.summary["passing"]}
    decisions = [
        configwriter.Decision(*k, mode="mandatory_success", reason="check") for k in waiting
    ]
    text = configwriter.standalone(pipeline.current_config(backend), decisions)
    with_op = device_outcomes(tree, text, backend, caps.with_op(op), "with-op")
    without = device_outcomes(tree, text, backend, caps, "without-op")
    now_pass = {key for key in waiting if passing(with_op.get(key, []))}
    failed_before = {key for key in waiting if not passing(without.get(key, []))}
    exact = proposed == now_pass and failed_before == set(waiting)
    print(
        f"enable {op}: {len(waiting)} tests waiting on it (all failing without it: "
        f"{failed_before == set(waiting)}), {len(now_pass)} pass with it, {len(proposed)} proposed; "
        f"proposals == waiting tests that now pass: {proposed == now_pass}"
    )
    return exact


if __name__ == "__main__":
    raise SystemExit(main())
