"""A run's tests share tensors between processes however deep crcr's work folder lies.

Found on test_torch.py in a real run (issue 34): `test_RNG_after_pickle` pickles a tensor
with torch's ForkingPickler, which opens a Unix socket under $TMPDIR; the run's TMPDIR
in a work folder under a long path left the socket's path over its 107 bytes
("OSError: AF_UNIX path too long"), on every attempt, while stage 4 had passed it.
"""

import shutil
import subprocess
import tempfile

import pytest

from runs import planning
from tests.factories import make_backend, make_pr_run

SHARE = """
import io, pickle, torch, torch.multiprocessing
from multiprocessing.reduction import ForkingPickler
ForkingPickler(io.BytesIO(), pickle.HIGHEST_PROTOCOL).dump(torch.tensor([1, 2, 3]))
print("shared")
"""


@pytest.mark.django_db
def test_a_run_in_a_deep_work_folder_can_still_share_a_tensor(tmp_path, settings):
    settings.CRCR_WORK_DIR = str(tmp_path / ("a-work-folder-under-a-long-path-" * 3))
    run = make_pr_run(make_backend())
    environment = planning.environment_for(run, tmp_path)
    done = subprocess.run(
        [environment.python, "-c", SHARE], env=environment.variables,
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.stdout.strip() == "shared", done.stderr[-2000:]
    tmpdir = environment.variables["TMPDIR"]
    assert not tmpdir.startswith(settings.CRCR_WORK_DIR)  # its own path had no room
    assert run.uuid.hex[:16] in tmpdir  # still the run's own, apart from other runs'


@pytest.mark.django_db
def test_a_run_keeps_its_temporary_files_in_its_work_folder_where_there_is_room(tmp_path, settings):
    short = tempfile.mkdtemp(prefix="w", dir="/tmp")  # pytest's own tmp_path is too deep
    try:
        settings.CRCR_WORK_DIR = short
        run = make_pr_run(make_backend())
        tmpdir = planning.environment_for(run, tmp_path).variables["TMPDIR"]
        assert tmpdir == str(planning.workdir_for(run) / "tmp")
    finally:
        shutil.rmtree(short)
