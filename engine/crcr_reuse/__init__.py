"""Declarative reuse of PyTorch's own tests on an out-of-tree device (no Django here).

PYTEST_DONT_REWRITE: `-p crcr_reuse` names this package too; its plugin is `plugin.py`.
"""
