"""A selection run spread over the device queue's workers, a chunk of tests per task: the
same proposals as the one-process path, and its page shows the progress of each file."""

import shutil
from pathlib import Path

from django.conf import settings
from django.urls import reverse

from crcr_site.celery import app
from selection import pipeline
from selection.models import Proposal, SelectionChunk, SelectionRun
from tests.factories import make_backend, make_config, make_user
from tests.waiting import wait_for
from tests.workers import environment, start_worker, stop

BUNDLED = Path(settings.BASE_DIR) / "tests" / "upstream"
# One file of the bundled tree (each chunk pays a test process's start, and the other files
# plant a crash and a hang, a minute each in either path), with its entries of the config.
FILES = ["pytest.ini", "refdev_faults.yaml", "test/conftest.py", "test/test_dtypes_reuse.py"]


def one_file(root: Path) -> tuple[Path, str]:
    """A copy of the bundled tree with one of its test files; its config."""
    for name in FILES:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(BUNDLED / name, root / name)
    # A test the file adds to its class when imported (as test_torch.py does): no source
    # scan lists it, so the chunk that runs it is the one told which tests are listed.
    copy = root / "test" / "test_dtypes_reuse.py"
    copy.write_text(copy.read_text().replace(
        "instantiate_device_type_tests(TestTensorBasics",
        "def _make():\n    def test_added_at_import(self, device):\n"
        "        self.assertEqual(torch.ones(2, device=device).sum().item(), 2.0)\n\n"
        "    return test_added_at_import\n\n\n"
        'setattr(TestTensorBasics, "test_added_at_import", _make())\n'
        "instantiate_device_type_tests(TestTensorBasics",
    ))  # fmt: skip
    config = (BUNDLED / "crcr-config.yaml").read_text()
    head, _, rest = config.partition("    - path: test/test_ops_reuse.py")
    _, _, rest = rest.partition("    - path: test/test_dtypes_reuse.py")
    entry, _, rest = rest.partition("    - path: test/test_modules_reuse.py")
    tail = rest[rest.index("  global:") :]
    return root, f"{head}    - path: test/test_dtypes_reuse.py{entry}{tail}"


def send(broker: str, task: str, *args: object) -> None:
    """Send a task by name to the workers' private broker, on the device queue."""
    with app.connection_for_write(broker) as connection:
        app.send_task(task, args=list(args), queue="device", connection=connection)


def decided(backend: object) -> set[tuple[str, ...]]:
    """What the review queue holds for the backend, as a reviewer reads it."""
    return {
        (p.file_path, p.class_name, p.test_name, p.mode, p.stage, p.reason, str(p.edits))
        for p in Proposal.objects.filter(backend=backend)
    }


def finished(run: SelectionRun, timeout: float = 600) -> SelectionRun:
    return wait_for(
        lambda: SelectionRun.objects.filter(pk=run.pk, finished_at__isnull=False).first(),
        timeout=timeout,
        what="the selection run to finish",
    )


def test_a_run_spread_in_chunks_over_a_worker_proposes_what_one_process_does(
    transactional_db, broker, tmp_path
):
    tree, config = one_file(tmp_path / "tree")
    spread, alone = (make_backend(slug, extension_points=["eager"]) for slug in ("spread", "alone"))
    make_config(spread, config)
    make_config(alone, config)
    # Small chunks: the file is cut in two for the capture and for the device.
    env = environment(tmp_path, broker, TORCH_ROOT=str(tree), CRCR_SELECTION_CHUNK="10")
    worker = start_worker(env, "chunks", log=tmp_path / "worker.log", queues="device")
    try:
        run = pipeline.start_run(spread, SelectionRun.Kind.SELECT)
        send(broker, "selection.tasks.run_selection", run.pk)
        run = finished(run)
    finally:
        stop(worker)
    assert run.status == SelectionRun.Status.DONE, run.error
    one_process = pipeline.run_for_backend(alone, tree)
    assert one_process.status == SelectionRun.Status.DONE, one_process.error

    assert decided(spread) and decided(spread) == decided(alone)
    added = ("test/test_dtypes_reuse.py", "TestTensorBasics", "test_added_at_import")
    assert added in {row[:3] for row in decided(spread)}
    assert run.summary["stage4"]["corrected"] == one_process.summary["stage4"]["corrected"]
    chunks = SelectionChunk.objects.filter(run=run)
    split = chunks.filter(phase="capture", ordinal__gt=0)
    assert split.exists() and chunks.filter(phase="device").exists()
    assert set(chunks.values_list("status", "claims")) == {("done", 1)}
    assert all(chunk.done == chunk.total for chunk in chunks.filter(phase="device"))


def test_the_run_page_shows_each_files_chunks_and_tests_done(client, db):
    backend = make_backend("acme")
    run = SelectionRun.objects.create(
        backend=backend, kind="select", status="waiting", stage="stage 4: device chunks"
    )
    rows = [
        ("capture", "test/test_ops_reuse.py", 0, "done", 2, 2),
        ("device", "test/test_ops_reuse.py", 0, "done", 40, 40),
        ("device", "test/test_ops_reuse.py", 1, "running", 12, 40),
        ("device", "test/test_plain_reuse.py", 0, "queued", 0, 6),
    ]
    for phase, path, ordinal, status, done, total in rows:
        SelectionChunk.objects.create(
            run=run, phase=phase, file_path=path, ordinal=ordinal, status=status,
            done=done, total=total,
        )  # fmt: skip
    client.force_login(make_user("vera"))
    url = reverse("selection:selectionrun_detail", args=[run.uuid])

    for headers in ({}, {"HTTP_HX_REQUEST": "true"}):
        response = client.get(url, **headers)
        assert response.status_code == 200  # still waiting: the page keeps polling
        text = " ".join(response.content.decode().split())
        assert "waiting for its chunks" in text
        assert (
            "<td><code>test/test_ops_reuse.py</code></td> <td>stage 4 on the device</td> "
            "<td>1/2</td>" in text
        )
        assert "52/80" in text and "running" in text
        assert "test/test_plain_reuse.py" in text and "0/6" in text
        assert "operator capture" in text and "2/2" in text
        assert "{" not in text.split("<table", 1)[1].split("</table>", 1)[0]  # no raw JSON


def test_a_test_over_a_named_database_is_sized_by_its_entries():
    """Found on test_modules.py: `@modules(module_db)` leaves the inventory the name, not
    the ~200 modules, so the whole file made one chunk and a second worker sat idle."""
    from torch.testing._internal.common_modules import module_db

    from selection.chunks import estimate
    from selection.models import UpstreamTest

    over_modules = UpstreamTest(modules=["module_db"], ops=[], dtypes=[])
    assert estimate(over_modules) == len(module_db) > 100
    assert estimate(UpstreamTest(ops=["add", "sub"], modules=[], dtypes=["float32"])) == 2
