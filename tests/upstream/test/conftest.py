# The planted faults of this tree (see ../README.md) unless the run chose its own.
import os

os.environ.setdefault(
    "CRCR_REFDEV_FAULTS", os.path.join(os.path.dirname(__file__), "..", "refdev_faults.yaml")
)
