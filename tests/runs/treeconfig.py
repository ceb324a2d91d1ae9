"""The bundled upstream-style tree and its demo config, as a run uses them."""

from pathlib import Path

from django.conf import settings

TREE = Path(settings.BASE_DIR) / "tests" / "upstream"


def tree_config(drop: tuple[str, ...] = ()) -> str:
    """The tree's demo config with `${TORCH_ROOT}` paths, less the files in `drop`."""
    text = (TREE / "crcr-config.yaml").read_text()
    return text.replace("path: test/", "path: ${TORCH_ROOT}/test/")
