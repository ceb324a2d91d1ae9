"""A worker SIGKILLed in the middle of a selection run's chunk: beat's sweep hands the chunk
to another worker once its heartbeat has gone silent, the new attempt keeps what the dead
one stored and runs only the rest, and the run ends with every test's result."""

import signal
from collections import Counter
from pathlib import Path

from crcr_site.lib import leases
from selection import pipeline
from selection.models import SelectionChunk, SelectionRun
from tests.factories import make_backend, make_config
from tests.selection.test_chunks import send
from tests.waiting import wait_for
from tests.workers import Beat, environment, start_worker, stop

NAMES = [f"test_step_{n}" for n in range(10)]
# Each test takes a second on the device, and writes its name beside itself once done.
SLOW = (
    '''"""Slow steps on the device."""
import time
from pathlib import Path

import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase


class TestSteps(TestCase):
    def step(self, device):
        a = torch.ones(4, device=device)
        self.assertEqual((a + a).cpu(), torch.full((4,), 2.0))
        if device != "cpu":
            time.sleep(1.0)
            with open(Path(__file__).with_name("ran.txt"), "a") as ran:
                ran.write(self._testMethodName + "\\n")
'''
    + "".join(f"\n    def {name}(self, device):\n        self.step(device)\n" for name in NAMES)
    + "\n\ninstantiate_device_type_tests(TestSteps, globals())\n"
)
CONFIG = """test_suite_config:
  files:
    - path: ${TORCH_ROOT}/test/test_steps.py
      unlisted_test_mode: mandatory_success
  global:
    supported_dtypes: [{name: float32}]
"""


def test_a_chunk_whose_worker_was_killed_resumes_without_running_its_stored_tests_again(
    transactional_db, broker, tmp_path
):
    tree = tmp_path / "tree"
    (tree / "test").mkdir(parents=True)
    (tree / "test" / "test_steps.py").write_text(SLOW)
    backend = make_backend("steps", extension_points=["eager"])
    make_config(backend, CONFIG)
    env = environment(tmp_path, broker, TORCH_ROOT=str(tree), CRCR_LOST_WORK_SECONDS="1")
    first = start_worker(env, "first", log=tmp_path / "first.log", queues="device")
    second = None
    try:
        run = pipeline.start_run(backend, SelectionRun.Kind.SELECT)
        send(broker, "selection.tasks.run_selection", run.pk)
        chunk = wait_for(
            lambda: SelectionChunk.objects.filter(run=run, phase="device", done__gte=3).first(),
            timeout=300,
            what="the device chunk to store some results",
        )
        first.send_signal(signal.SIGKILL)
        first.wait(timeout=30)
        chunk.refresh_from_db()
        stored = {record["node_id"].rsplit("::", 1)[1] for record in chunk.results}
        assert chunk.status == "running" and len(stored) >= 3

        second = start_worker(env, "second", log=tmp_path / "second.log", queues="default,device")
        beat = Beat(broker, "selection.tasks.resend_lost_work", every=2)
        run = wait_for(
            lambda: (
                beat.tick()
                and SelectionRun.objects.filter(pk=run.pk, finished_at__isnull=False).first()
            ),
            timeout=300,
            what="the run to finish on the second worker",
        )
    finally:
        stop(first, second)
    assert run.status == SelectionRun.Status.DONE, run.error
    chunk.refresh_from_db()
    assert (chunk.status, chunk.claims, chunk.last_failure) == ("done", 2, leases.WORKER_STOPPED)
    assert chunk.done == chunk.total == len(NAMES)
    ran = Counter(Path(tree / "test" / "ran.txt").read_text().split())
    assert {name.rsplit("_", 1)[0] for name in ran} == set(NAMES)  # less the device
    # What the dead attempt stored ran once; at most the test it was killed in ran twice.
    assert all(ran[name] == 1 for name in stored)
    assert sum(ran.values()) <= len(NAMES) + 1
    assert run.summary["stage4"]["tests"] == len(NAMES)
