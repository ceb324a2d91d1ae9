"""The bundled upstream-style tree and its demo config, as a run uses them."""

from runs.demo import BUNDLED_TREE as TREE
from runs.demo import bundled_tree_config as tree_config

__all__ = ["TREE", "tree_config"]
