"""Crash pinning and retries in real pytest subprocesses (plain tests, no torch)."""

import os
import sys
import textwrap
from pathlib import Path

import pytest
from crcr_reuse.launcher import PytestRun, TestEnvironment

from runs.crash_pinning import DevicePoisoned, Executor, ProcessFailed, ProcessSilent, ShardSpec

ROOT = Path(__file__).resolve().parents[2]

PLANTED = textwrap.dedent(
    """
    import os, time
    from pathlib import Path

    def test_passes():
        assert True

    def test_fails():
        assert 1 == 2, "consistently wrong"

    def test_crashes():
        os.abort()

    def test_after_the_crash():
        assert True

    def test_hangs():
        time.sleep(600)

    def test_flaky(tmp_path_factory):
        marker = Path(os.environ["FLAKY_MARKER"])
        if not marker.exists():
            marker.write_text("failed once")
            assert False, "first run fails"

    def test_fails_then_crashes():
        marker = Path(os.environ["FLAKY_MARKER"] + ".crash")
        if marker.exists():
            os.abort()
        marker.write_text("failed once")
        assert False, "first run fails"

    def test_last():
        assert True
    """
)


def plain_pytest(tree: Path, env: dict[str, str], *args: str) -> PytestRun:
    """pytest on a plain tree: no reuse plugin, no device."""
    environment = TestEnvironment(sys.executable, env)
    return PytestRun(
        environment, tree, extra_args=["-p", "no:crcr_reuse", "-p", "no:django", *args]
    )


def run(
    tmp_path: Path, retry=lambda record: True, names=None, **spec_fields
) -> tuple[dict, list, Executor]:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "test_planted.py").write_text(PLANTED)
    names = names or ["passes", "fails", "crashes", "after_the_crash", "hangs", "flaky", "last"]
    ids = [f"test_planted.py::test_{name}" for name in names]
    env = dict(os.environ, FLAKY_MARKER=str(tmp_path / "flaky"), PYTHONPATH=str(ROOT))
    spec = ShardSpec(
        ids=ids,
        workdir=tmp_path / "work",
        pytest=plain_pytest(tree, env),
        timeout=60,
        test_timeout=3,
        **spec_fields,
    )
    executor = Executor(spec, should_retry=retry)
    attempts = executor.run()
    final = {}
    for record in sorted(attempts, key=lambda r: r.attempt):
        final[record.node_id.split("::")[1].removeprefix("test_")] = record
    return final, attempts, executor


@pytest.fixture(scope="module")
def planted(tmp_path_factory):
    return run(tmp_path_factory.mktemp("planted"))


def test_every_test_gets_its_real_outcome_despite_a_crash_and_a_hang(planted):
    final, attempts, _ = planted
    outcomes = {name: record.outcome for name, record in final.items()}
    assert outcomes == {
        "passes": "passed",
        "fails": "failed",
        "crashes": "crashed",
        "after_the_crash": "passed",
        "hangs": "timed_out",
        "flaky": "passed",
        "last": "passed",
    }
    assert "SIGABRT" in final["crashes"].message
    assert "consistently wrong" in final["fails"].message


def test_a_failure_is_retried_alone_and_a_pass_on_retry_shows_it_flaky(planted):
    _, attempts, _ = planted
    by_test: dict[str, list[str]] = {}
    for record in attempts:
        by_test.setdefault(record.node_id.split("::")[1], []).append(record.outcome)
    assert by_test["test_flaky"] == ["failed", "passed"]
    assert by_test["test_fails"] == ["failed", "failed", "failed"]
    assert by_test["test_passes"] == ["passed"]


def test_retried_together_a_rounds_failures_share_one_process_and_a_crash_is_pinned(tmp_path):
    names = ["passes", "fails", "flaky", "fails_then_crashes", "last"]
    final, attempts, executor = run(tmp_path, names=names, retry_together=True)
    by_test: dict[str, list[tuple[int, str]]] = {}
    for record in attempts:
        name = record.node_id.split("::")[1].removeprefix("test_")
        by_test.setdefault(name, []).append((record.attempt, record.outcome))
    assert by_test["fails"] == [(1, "failed"), (2, "failed"), (3, "failed")]
    assert by_test["flaky"] == [(1, "failed"), (2, "passed")]
    assert by_test["fails_then_crashes"] == [(1, "failed"), (2, "crashed")]
    assert "SIGABRT" in final["fails_then_crashes"].message
    assert by_test["passes"] == [(1, "passed")]
    # The first run, round 2 (it crashed), the crash alone, round 3: four processes where
    # retrying each failure alone takes five.
    assert executor.processes == 4


def test_failures_the_caller_does_not_want_retried_run_once(tmp_path):
    _, attempts, _ = run(tmp_path, retry=lambda record: False, names=["passes", "fails"])
    assert sum(r.node_id.endswith("test_fails") for r in attempts) == 1


def test_a_pytest_that_cannot_start_is_an_infrastructure_failure(tmp_path):
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "test_ok.py").write_text("def test_ok():\n    assert True\n")
    spec = ShardSpec(
        ids=["test_ok.py::test_ok"],
        workdir=tmp_path / "work",
        pytest=plain_pytest(
            tree, dict(os.environ, PYTHONPATH=str(ROOT)), "-p", "plugin_that_does_not_exist"
        ),
    )
    with pytest.raises(ProcessFailed, match="before any test"):
        Executor(spec, should_retry=lambda record: True).run()


def silent_tree(tmp_path: Path, conftest: str, tests: str) -> ShardSpec:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "conftest.py").write_text(textwrap.dedent(conftest))
    (tree / "test_quiet.py").write_text(textwrap.dedent(tests))
    return ShardSpec(
        ids=["test_quiet.py::test_one", "test_quiet.py::test_two"],
        workdir=tmp_path / "work",
        # This checkout's engine: its progress log plugin answers the request for stacks.
        pytest=plain_pytest(tree, dict(os.environ, PYTHONPATH=f"{ROOT}:{ROOT / 'engine'}")),
        timeout=120,
        test_timeout=60,
        quiet_timeout=3,
    )


def test_a_process_silent_before_any_test_is_killed_as_infrastructure_with_its_last_output(
    tmp_path,
):
    conftest = """
        import time

        def open_the_device_driver():
            time.sleep(600)

        open_the_device_driver()
    """
    tests = "def test_one():\n    pass\n\ndef test_two():\n    pass\n"
    spec = silent_tree(tmp_path, conftest, tests)
    with pytest.raises(ProcessSilent) as silent:
        Executor(spec, should_retry=lambda record: True).run()
    # Killed at the quiet limit (ProcessSilent), not at the shard's limit nor the test's.
    message = str(silent.value)
    assert "printed nothing for 3 s outside any test" in message
    # Where it was stuck: its stack, in the message and in the process's log.
    assert "in open_the_device_driver" in message and "conftest.py" in message
    assert "in open_the_device_driver" in (tmp_path / "work" / "p001.log").read_text()


def test_a_silent_test_is_a_test_hang_not_a_silent_process(tmp_path):
    """Inside a test, silence is the per-test limit's: even a quiet limit far shorter than it
    leaves the test to be judged timed out, and the other test still runs."""
    tests = "import time\n\ndef test_one():\n    time.sleep(600)\n\ndef test_two():\n    pass\n"
    spec = silent_tree(tmp_path, "", tests)
    spec.test_timeout = 6
    spec.quiet_timeout = 2
    final = {r.node_id: r.outcome for r in Executor(spec, should_retry=lambda r: False).run()}
    assert final == {"test_quiet.py::test_one": "timed_out", "test_quiet.py::test_two": "passed"}


def test_a_process_that_dies_after_its_last_test_keeps_every_outcome(tmp_path):
    """A crash or a shard timeout once every test has ended (a segfault in the session's
    teardown, a loaded host) blames no test: each keeps the outcome it reported."""
    conftest = """
        import os
        import signal

        def pytest_sessionfinish(session):
            os.kill(os.getpid(), signal.SIGSEGV)
    """
    tests = "def test_one():\n    pass\n\ndef test_two():\n    assert False\n"
    spec = silent_tree(tmp_path, conftest, tests)
    executor = Executor(spec, should_retry=lambda r: False)
    final = {r.node_id: r.outcome for r in executor.run()}
    assert final == {"test_quiet.py::test_one": "passed", "test_quiet.py::test_two": "failed"}
    assert executor.processes == 1  # nothing to pin alone


POISONING = textwrap.dedent(
    """
    import os
    from pathlib import Path

    def test_passes():
        assert True

    def test_fails():
        assert 1 == 2, "consistently wrong"

    def test_poisons_the_device():
        Path(os.environ["DEVICE_POISONED"]).write_text("poisoned")
        assert False, "wrong on a poisoned device"

    def test_never_runs():
        assert True
    """
)


def test_a_failed_health_probe_ends_the_attempt_keeping_only_what_the_device_vouched_for(
    tmp_path,
):
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "test_poisoning.py").write_text(POISONING)
    marker = tmp_path / "poisoned"
    # The device is the marker file: healthy while it does not exist. The probe's watch
    # is the reuse plugin's, registered here without a device (plain tests, no torch).
    probe = f"command:test ! -e {marker}"
    (tree / "conftest.py").write_text(
        "from crcr_reuse.health_probe import HealthProbe, ProbeWatch\n"
        "def pytest_configure(config):\n"
        f"    config.pluginmanager.register(ProbeWatch(HealthProbe.parse({probe!r}), 0))\n"
    )
    engine = os.pathsep.join([str(ROOT), str(ROOT / "engine")])  # this checkout's engine
    env = dict(os.environ, DEVICE_POISONED=str(marker), PYTHONPATH=engine)
    names = ["passes", "fails", "poisons_the_device", "never_runs"]
    spec = ShardSpec(
        ids=[f"test_poisoning.py::test_{name}" for name in names],
        workdir=tmp_path / "work",
        pytest=plain_pytest(tree, env),
    )
    with pytest.raises(DevicePoisoned) as raised:
        Executor(spec, should_retry=lambda record: True).run()
    poisoned = raised.value
    assert str(poisoned) == (
        f"device poisoned: health probe {probe} failed after "
        f"test_poisoning.py::test_poisons_the_device: exit status 1"
    )
    assert poisoned.poisoning.suspects == ("test_poisoning.py::test_poisons_the_device",)
    # A failure on a healthy device is not kept either: it runs again in the fresh attempt.
    assert [record.node_id for record in poisoned.kept] == ["test_poisoning.py::test_passes"]
