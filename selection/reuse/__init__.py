"""Declarative reuse of PyTorch's own tests on an out-of-tree device (no Django here)."""
