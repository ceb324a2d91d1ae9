"""The reference device: real PrivateUse1 tensors, CPU kernels, NotImplementedError, faults."""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import pytest

from .conftest import Run, clean_env, heavy_run, run_python

pytestmark = pytest.mark.heavy_runs("device")

BASICS = """
import json, torch, warnings
import crcr_reuse.reference_device as device
t = torch.arange(6.0, device="privateuseone").view(2, 3)
row = t[1]
row[0] = 42.0
facts = {
    "device": str(t.device),
    "keys": str(torch._C._dispatch_keys(t)),
    "storage": str(t.untyped_storage().device),
    "shared": t.cpu()[1, 0].item(),
    "is_view": row._is_view() and row._base is t._base,
    "doubled_sum": (t * 2).sum().item(),
    "listed": len(device.operator_names()),
    "available": torch.privateuseone.is_available(),
}
try:
    torch.lgamma(t)
except NotImplementedError as error:
    facts["unsupported"] = str(error).splitlines()[0]
# out= forms: an output with no memory yet (what composite operators such as abs pass),
# and one too small, which grows with PyTorch's warning.
empty = torch.empty(0, device="privateuseone")
facts["abs_out"] = [torch.abs(-t, out=empty) is empty, list(empty.shape), empty.cpu().tolist()]
short = torch.zeros(2, device="privateuseone")
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    torch.neg(t, out=short)
facts["grown"] = [short.cpu().tolist(), any("resized" in str(w.message) for w in caught)]
print(json.dumps(facts))
"""

FAULTS = """
import json, signal, time, torch
import crcr_reuse.reference_device
ones = torch.ones(3, device="privateuseone")
facts = {"neg32": torch.neg(ones).cpu().tolist(), "neg64": torch.neg(ones.double()).cpu().tolist()}
try:
    ones * ones
except NotImplementedError as error:
    facts["disabled"] = str(error).splitlines()[0]
def interrupt(signum, frame):
    raise TimeoutError
signal.signal(signal.SIGALRM, interrupt)
signal.alarm(2)
start = time.monotonic()
try:
    torch.sign(ones)  # the profile makes sign hang
except TimeoutError:
    facts["hung_for"] = round(time.monotonic() - start, 1)
print(json.dumps(facts))
"""

# Found on PyTorch's test_modules.py: its reference function deep-copies the module's
# inputs, and copying a device storage asks the device's allocator for memory.
COPIES = """
import copy, json, torch
from crcr_reuse.reference_device import native
import crcr_reuse.reference_device
t = torch.arange(6.0, device="privateuseone").view(2, 3)
twin = copy.deepcopy(t)
twin[0, 0] = 7.0
storage = torch.UntypedStorage(16, device="privateuseone")
print(json.dumps({
    "native": native.load() is not None,
    "copy": twin.cpu().tolist(), "original": t.cpu().tolist(),
    "copy_device": str(twin.device), "storage": [str(storage.device), storage.nbytes()],
}))
"""

CRASH = """
import torch
import crcr_reuse.reference_device
torch.neg(torch.ones(2, device="privateuseone"))
print("still alive")
"""

PROFILE = json.dumps(
    {
        "faults": [
            {"op": "neg", "kind": "deviation", "amount": 0.5, "dtypes": ["float32"]},
            {"op": "sign", "kind": "hang"},
        ]
    }
)


@heavy_run("device")
def _device_runs(workdir: Path) -> dict[str, Run]:
    crash = json.dumps({"faults": [{"op": "neg", "kind": "crash"}]})
    return {
        "basics": run_python(BASICS),
        "python_basics": run_python(BASICS, clean_env(CRCR_REFDEV_NATIVE="0")),
        "copies": run_python(COPIES),
        "faults": run_python(
            FAULTS, clean_env(CRCR_REFDEV_FAULTS=PROFILE, CRCR_REFDEV_DISABLE="mul")
        ),
        "crash": run_python(CRASH, clean_env(CRCR_REFDEV_FAULTS=crash)),
    }


def facts(background: Any, name: str) -> dict[str, Any]:
    run = background.result("device")[name]
    assert run.returncode == 0, run.stderr[-2000:]
    return dict(json.loads(run.stdout.splitlines()[-1]))


def test_device_tensors_are_real_privateuse1_tensors_backed_by_device_storage(
    background: Any,
) -> None:
    found = facts(background, "basics")
    assert found["device"] == "privateuseone:0" and found["available"]
    assert "PrivateUse1" in found["keys"] and found["storage"] == "privateuseone:0"


def test_kernels_compute_on_the_cpu_and_views_share_device_memory(background: Any) -> None:
    found = facts(background, "basics")
    assert found["shared"] == 42.0 and found["is_view"]
    assert found["doubled_sum"] == 2 * (0 + 1 + 2 + 42 + 4 + 5)


def test_an_out_argument_takes_the_results_shape_on_the_device(background: Any) -> None:
    found = facts(background, "basics")
    rows = [[0.0, 1.0, 2.0], [42.0, 4.0, 5.0]]
    assert found["abs_out"] == [True, [2, 3], rows]
    assert found["grown"] == [[[-v for v in row] for row in rows], True]


def test_the_python_kernels_behave_as_the_cpp_ones(background: Any) -> None:
    assert facts(background, "python_basics") == facts(background, "basics")
    assert "Python kernels" not in background.result("device")["basics"].stderr


def test_a_device_tensor_deep_copies_into_fresh_device_memory(background: Any) -> None:
    found = facts(background, "copies")
    assert found["native"], "the C++ kernels were not built on this machine"
    assert found["copy"] == [[7.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    assert found["original"] == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    assert found["copy_device"] == "privateuseone:0"
    assert found["storage"] == ["privateuseone:0", 16]


def test_the_default_operator_set_has_a_few_hundred_operators(background: Any) -> None:
    assert 300 <= facts(background, "basics")["listed"] <= 500


def test_an_operator_outside_the_set_raises_pytorchs_not_implemented_error(background: Any) -> None:
    message = facts(background, "basics")["unsupported"]
    assert message.startswith(
        "Could not run 'aten::lgamma.out' with arguments from the 'PrivateUse1' backend. "
        "This could be because the operator doesn't exist for this backend"
    )
    assert "is only available for these backends: [CPU, Meta," in message


def test_a_deviation_fault_shifts_only_the_named_op_and_dtype(background: Any) -> None:
    found = facts(background, "faults")
    assert found["neg32"] == [-0.5, -0.5, -0.5]
    assert found["neg64"] == [-1.0, -1.0, -1.0]


def test_a_disabled_operator_becomes_unsupported(background: Any) -> None:
    assert (
        "Could not run 'aten::mul.out' with arguments from the 'PrivateUse1' backend"
        in (facts(background, "faults")["disabled"])
    )


def test_a_crash_fault_kills_the_process_with_a_signal(background: Any) -> None:
    run = background.result("device")["crash"]
    assert run.returncode == -signal.SIGSEGV
    assert "crcr reference device: injected crash in aten::neg" in run.stderr
    assert "still alive" not in run.stdout


def test_a_hang_fault_hangs_until_something_interrupts_it(background: Any) -> None:
    assert facts(background, "faults")["hung_for"] >= 2.0
