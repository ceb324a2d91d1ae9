"""Where the tests' input data comes from.

The project's own small fixtures (`tests/fixtures/`) are always there: a test that only
needs *a* webhook or *a* test-times file reads them. PyTorch CI's real data
(`shared/data/`, see `runs.durations.shared_data_dir`) is not part of a clone: the tests
whose point is the real file take the `real_data` fixture (tests/conftest.py), which
skips them, all with the one reason below, when the data is absent.
"""

from pathlib import Path

import pytest

from runs.durations import shared_data_dir

FIXTURES = Path(__file__).resolve().parent / "fixtures"

REAL_DATA_ABSENT = (
    "real PyTorch CI data not present: set CRCR_SHARED_DATA or put shared/data beside the checkout"
)


def real_data_dir() -> Path:
    """The folder of PyTorch CI's real data; skips the calling test when it is absent."""
    folder = shared_data_dir()
    if folder is None:
        pytest.skip(REAL_DATA_ABSENT)
    return folder
