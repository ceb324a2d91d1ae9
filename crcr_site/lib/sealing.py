"""A worker's credentials kept where the test processes it starts cannot read them.

Linux shows a process's environment as it was when the process started in
`/proc/<pid>/environ`, readable by every process of the same user (and by root): a test
that walks up its parents would find the Celery worker's `DATABASE_URL`. So a worker
seals itself as it starts (the `celeryd_init` signal, before it connects to anything):
1. it re-executes itself, same pid and arguments, with every credential taken out of
   its environment (`redaction.is_secret`: crcr's own URLs and secret-looking names);
2. the credentials reach the new image in an anonymous memory file (memfd) named by
   `CRCR_SEALED_FD`, which `unseal` reads and closes before Django reads its settings;
3. they go back into `os.environ`, where settings, redaction and the launcher's
   explicit pass-through find them: such values live in the process's heap, which
   `/proc/<pid>/environ` does not show;
4. the worker marks itself non-dumpable, so a process of its user that is not root
   can read neither its `/proc` files nor its memory (children that exec a program,
   as every test process does, are dumpable again: it is the worker's own mark).
The pool's processes are forked from the sealed image and show its environment.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys

from crcr_site.lib.redaction import is_secret

SEALED_FD = "CRCR_SEALED_FD"
PR_SET_DUMPABLE = 4
_sealed = False  # set in the re-executed image once it has its credentials back


def seal() -> None:
    """Re-execute this process without credentials in its environment (it returns only
    when there is nothing to seal: none held, or already sealed)."""
    if _sealed or not sys.platform.startswith("linux"):
        return
    secrets = {name: value for name, value in os.environ.items() if is_secret(name)}
    if not secrets:
        _no_dumps()
        return
    fd = os.memfd_create("crcr-sealed", 0)
    os.write(fd, json.dumps(secrets).encode())
    os.lseek(fd, 0, os.SEEK_SET)
    os.set_inheritable(fd, True)
    environ = {name: value for name, value in os.environ.items() if name not in secrets}
    environ[SEALED_FD] = str(fd)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, sys.orig_argv, environ)


def unseal() -> None:
    """In a sealed image: take the credentials back from the memory file, close it."""
    global _sealed
    named = os.environ.pop(SEALED_FD, None)
    if named is None:
        return
    _sealed = True
    fd = int(named)
    with os.fdopen(fd, "rb") as memory:
        secrets = json.loads(memory.read())
    os.environ.update(secrets)
    _no_dumps()


def _no_dumps() -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")
