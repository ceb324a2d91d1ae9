"""A test process cannot read its worker's credentials: it walks up its parents'
`/proc/<pid>/environ` and `cmdline` and finds none of them (issue 37 item 4)."""

import os
import subprocess
import sys
import uuid
from pathlib import Path

from django.conf import settings

from runs.models import Run
from tests.factories import make_backend, make_config
from tests.waiting import wait_for
from tests.workers import environment, start_worker, stop, trigger

CANARY = "crcr-canary-"
# An upstream-style test that does what a hostile or careless test could: read every
# ancestor's environment and command line, and name each variable holding the canary.
SNOOPING_TEST = f'''import os
import unittest


def ancestors():
    pid = os.getppid()
    while pid > 1:
        yield pid
        with open(f"/proc/{{pid}}/stat") as stat:
            pid = int(stat.read().rsplit(")", 1)[1].split()[1])


class TestSnooping(unittest.TestCase):
    def test_no_ancestor_shows_a_credential(self):
        read, found = 0, []
        for pid in ancestors():
            for part in ("environ", "cmdline"):
                try:
                    with open(f"/proc/{{pid}}/{{part}}", "rb") as proc:
                        entries = proc.read().decode(errors="replace").split("\\0")
                except OSError:
                    continue
                read += 1
                found += [f"{{pid}} {{part}} " + e.split("=")[0] for e in entries if "{CANARY}" in e]
        self.assertGreater(read, 4, "the test read too few of its ancestors to tell")
        self.assertEqual(found, [])
'''
CONFIG = """test_suite_config:
  files:
    - path: ${TORCH_ROOT}/test/test_snooping.py
      unlisted_test_mode: mandatory_success
"""


def test_a_test_process_finds_no_credential_in_its_ancestors(transactional_db, broker, tmp_path):
    tree = tmp_path / "tree"
    (tree / "test").mkdir(parents=True)
    (tree / "test" / "test_snooping.py").write_text(SNOOPING_TEST)
    token = uuid.uuid4().hex
    key_file = tmp_path / f"{CANARY}key"
    key_file.write_text(f"{CANARY}{token}-secret-key")
    database = settings.DATABASES["default"]
    # The test database trusts its clients, so the password is never asked for.
    credentials = f"{database['USER']}:{CANARY}{token}"
    env = environment(
        tmp_path, broker,
        DATABASE_URL=f"postgres://{credentials}@{database['HOST']}:{database['PORT']}/{database['NAME']}",
        SECRET_KEY_FILE=str(key_file),
        TORCH_ROOT=str(tree),
        CRCR_SECRETS_DIR=str(tmp_path / "relay-tokens"),
        CRCR_RELAY_TOKEN=f"{CANARY}{token}-relay",
    )  # fmt: skip
    backend = make_backend("snoop")
    make_config(backend, CONFIG)
    worker = start_worker(env, "sealed", log=tmp_path / "worker.log")
    try:
        trigger(env, "snoop", "d" * 40)
        run = wait_for(
            lambda: Run.objects.filter(backend=backend, status__in=Run.FINISHED).first(),
            timeout=600,
            what="the run to finish",
        )
    finally:
        stop(worker)
    messages = list(run.results.values_list("node_id", "outcome", "message"))
    assert [outcome for _, outcome, _ in messages] == ["passed"], messages
    assert run.status == "passed"


def test_a_sealed_process_keeps_its_credentials_out_of_proc(tmp_path: Path) -> None:
    """The mechanism alone: the re-executed image has the credentials in `os.environ`
    and not in `/proc/self/environ`, and is not dumpable."""
    probe = (
        "import ctypes, os, sys\n"
        "from crcr_site.lib import sealing\n"  # crcr_site's import unseals a sealed image
        "if sealing._sealed:\n"
        "    shown = open('/proc/self/environ', 'rb').read().decode()\n"
        "    dumpable = ctypes.CDLL(None).prctl(3, 0, 0, 0, 0)\n"  # PR_GET_DUMPABLE
        "    print(os.environ['DATABASE_URL'], os.environ['API_TOKEN'], "
        f"'{CANARY}' in shown, dumpable, os.environ.get('PLAIN'), sealing.SEALED_FD in shown)\n"
        "    sys.exit(0)\n"
        "sealing.seal()\n"
        "print('not sealed')\n"
    )
    env = dict(
        os.environ,
        DATABASE_URL=f"postgres://u:{CANARY}db@h/d",
        API_TOKEN=f"{CANARY}token",
        PLAIN="kept",
        PYTHONPATH=str(settings.BASE_DIR),
    )
    shown = subprocess.run(
        [sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=60
    )
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.split() == [
        f"postgres://u:{CANARY}db@h/d", f"{CANARY}token", "False", "0", "kept", "True"
    ]  # fmt: skip
