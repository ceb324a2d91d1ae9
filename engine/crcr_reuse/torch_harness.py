"""A faster stand-in for the part of torch's test harness that costs a variant most of its time.

torch's ``common_utils.extract_test_fn`` finds the running test by walking the stack
with ``inspect.stack()``, which also reads a line of source for every frame (through
``inspect.getmodule``, a scan of ``sys.modules`` per frame whose file it has not met).
Every OpInfo ``sample_inputs`` call runs it, and so every variant pays it: on the
bundled upstream-style tree it was about 85 % of a variant's time on the CPU and on a
device alike (``bench/refdev_speed.py``). The stand-in walks the same frames, in the
same order, with the same test, and reads no source: it returns what torch's returns.

Installed by the reuse plugin in each test process once its tests are collected
(``install``: torch's test modules are imported by then, and none is forced); a torch whose
function no longer walks ``inspect.stack`` keeps its own, and ``CRCR_REUSE_TORCH_STACK=1``
keeps torch's in every case (to measure it, or should a torch need its own).
"""

from __future__ import annotations

import os
import sys
import unittest
from collections.abc import Callable
from types import FrameType
from typing import Any

ENV_KEEP = "CRCR_REUSE_TORCH_STACK"
COMMON_UTILS = "torch.testing._internal.common_utils"
# Modules that import torch's function by name: each holds its own reference.
HOLDERS = ("torch.testing._internal.opinfo.core",)


def extract_test_fn() -> Callable[..., Any] | None:
    """The running test's function: the first frame up the stack whose ``self`` is the
    TestCase running a test of its own class (torch's rule), or None."""
    try:
        frame: FrameType | None = sys._getframe(1)
        while frame is not None:
            self_val = frame.f_locals.get("self")
            if isinstance(self_val, unittest.TestCase):
                *_, cls_name, test_name = self_val.id().rsplit(".", 2)
                if cls_name == type(self_val).__name__ and test_name.startswith("test"):
                    return getattr(self_val, test_name).__func__
            frame = frame.f_back
    except Exception:  # torch's own swallows every error the same way
        pass
    return None


def install() -> bool:
    """Put the stand-in in place of torch's wherever torch's test modules hold it (True when
    it did): ``common_utils`` and those that import it by name (``opinfo.core``)."""
    if os.environ.get(ENV_KEEP, "").strip().lower() in ("1", "true", "yes", "on"):
        return False
    common_utils = sys.modules.get(COMMON_UTILS)
    original = getattr(common_utils, "extract_test_fn", None)
    code = getattr(original, "__code__", None)
    if code is None or "stack" not in code.co_names:
        return original is extract_test_fn
    for name in (COMMON_UTILS, *HOLDERS):
        module = sys.modules.get(name)
        if getattr(module, "extract_test_fn", None) is original:
            module.extract_test_fn = extract_test_fn  # type: ignore[union-attr]
    return True
