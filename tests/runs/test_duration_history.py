"""A finished shard folds its tests' first durations into the device's history."""

import pytest
from crcr_reuse.outcomes import TestRecord

from runs import durations, shard_worker
from runs.models import TestDuration

pytestmark = pytest.mark.django_db

DEVICE = "acme_device"


def test_known_tests_gain_a_sample_and_new_tests_start_their_history():
    TestDuration.objects.create(
        test_id="t.py::T::test_known", device=DEVICE, seconds=1.0, spread=0.1, samples=3
    )
    shard_worker.remember_durations(DEVICE, [
        TestRecord("t.py::T::test_known", "passed", duration=1.2),
        TestRecord("t.py::T::test_new", "failed", duration=0.5),
        TestRecord("t.py::T::test_new", "passed", duration=9.0, attempt=2),  # a retry: not a sample
        TestRecord("t.py::T::test_skipped", "skipped", duration=0.0),  # nothing measured
    ])  # fmt: skip

    rows = {row.test_id: row for row in TestDuration.objects.filter(device=DEVICE)}
    assert set(rows) == {"t.py::T::test_known", "t.py::T::test_new"}
    folded = durations.update_duration(durations.DurationStats(1.0, 0.1, 3), 1.2)
    known = rows["t.py::T::test_known"]
    assert (known.seconds, known.spread, known.samples) == pytest.approx(
        (folded.mean, folded.spread, 4)
    )
    new = rows["t.py::T::test_new"]
    assert (new.seconds, new.spread, new.samples) == (0.5, 0.0, 1)


def test_another_devices_history_of_the_same_test_is_left_alone():
    TestDuration.objects.create(test_id="t.py::T::test_a", device="other", seconds=7.0)
    shard_worker.remember_durations(DEVICE, [TestRecord("t.py::T::test_a", "passed", duration=2.0)])
    assert TestDuration.objects.get(device="other").seconds == 7.0
    assert TestDuration.objects.get(device=DEVICE).seconds == 2.0
