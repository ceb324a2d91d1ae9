"""The build command the tests use: deploy/reference_build.py, which writes real wheels
(the pinned torch wheel from pip's index and the reference device as `crcr_refdev`)."""

import shlex
import sys
from pathlib import Path

from django.conf import settings

SCRIPT = Path(settings.BASE_DIR) / "deploy" / "reference_build.py"
# The backend whose device module is the reference build's wheel.
DEVICE_MODULE = "crcr_refdev"


def reference_build(torch_source: Path | None = None) -> str:
    """CRCR_BUILD_COMMAND for the reference build (built against `torch_source`'s commit)."""
    command = [sys.executable, str(SCRIPT)]
    if torch_source is not None:
        command += ["--torch-source", str(torch_source)]
    return shlex.join(command)
