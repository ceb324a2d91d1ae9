"""The bundled upstream-style tree and its demo config, as a run uses them."""

from demo.main_job import BUNDLED_TREE as TREE
from demo.main_job import bundled_tree_config as tree_config

__all__ = ["TREE", "tree_config"]
