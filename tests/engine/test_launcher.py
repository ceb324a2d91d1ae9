"""The launcher: what a test process started by crcr gets, and which tests it runs."""

import json
import os
import sys
import textwrap
from dataclasses import replace
from pathlib import Path

import pytest
from crcr_reuse.launcher import PytestRun, TestEnvironment

REPORTS_ENV = textwrap.dedent(
    """
    import json, os, sys

    def test_reports_its_environment():
        names = ("DATABASE_URL", "DJANGO_SETTINGS_MODULE", "CELERY_BROKER_URL", "TORCH_ROOT",
                 "PYTHONHASHSEED", "TMPDIR", "EXTRA")
        seen = {name: os.environ.get(name) for name in names}
        seen["python"] = sys.executable
        with open(os.environ["OUT"], "w") as out:
            json.dump(seen, out)

    def test_second():
        pass
    """
)


def tree_with_a_test(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "test_env.py").write_text(REPORTS_ENV)
    return tree


def test_a_test_process_gets_the_tree_and_seed_but_none_of_crcrs_settings(tmp_path, monkeypatch):
    monkeypatch.setenv("DATABASE_URL", "postgres://crcr-only@127.0.0.1/crcr")
    monkeypatch.setenv("DJANGO_SETTINGS_MODULE", "crcr_site.settings")
    tree = tree_with_a_test(tmp_path)
    out = tmp_path / "seen.json"
    environment = TestEnvironment.for_device(
        None, tree, tmpdir=tmp_path / "tmp", extra={"OUT": str(out), "EXTRA": "yes"}
    )
    completed = PytestRun(environment, tree, extra_args=["-p", "no:django"]).run(timeout=120)

    assert completed.returncode == 0, completed.stdout + completed.stderr
    seen = json.loads(out.read_text())
    assert seen["DATABASE_URL"] is None and seen["DJANGO_SETTINGS_MODULE"] is None
    assert seen["CELERY_BROKER_URL"] is None
    assert seen["TORCH_ROOT"] == str(tree)
    assert seen["PYTHONHASHSEED"] == "0"
    assert seen["TMPDIR"] == str(tmp_path / "tmp") and (tmp_path / "tmp").is_dir()
    assert seen["EXTRA"] == "yes"
    assert seen["python"] == sys.executable


WRITES_ITS_VARIABLES = textwrap.dedent(
    """
    import json, os

    def test_writes_the_names_of_its_variables():
        with open(os.environ["OUT"], "w") as out:
            json.dump(sorted(os.environ), out)
    """
)


def test_a_test_process_gets_only_the_variables_on_the_allow_list_and_the_operators(
    tmp_path, monkeypatch
):
    planted = {
        "AWS_SECRET_ACCESS_KEY": "wJalrXUtnFEMI",
        "AWS_REGION": "eu-west-1",
        "DATABASE_URL": "postgres://crcr-only@127.0.0.1/crcr",
        "GITHUB_TOKEN": "ghp_planted",
        "CELERY_RESULT_BACKEND": "redis://127.0.0.1:6379/1",
        "HTTPS_PROXY": "http://proxy.internal:3128",
        "TORCH_HUB_TOKEN": "planted",  # an allowed prefix, but it looks like a secret
        "SOME_UNRELATED_SETTING": "x",
        "PYTORCH_TEST_WITH_SLOW": "1",
        "OMP_NUM_THREADS": "2",
        "ACME_VISIBLE_CORES": "0,1",  # the device's own prefix (package `acme`)
        "VENDOR_LICENSE_SERVER": "lic.internal:27000",  # listed by name
        "VENDOR_SDK_ROOT": "/opt/vendor",  # listed by prefix
        "VENDOR_SDK_TOKEN": "planted",  # a prefix does not let a secret through
        "VENDOR_API_TOKEN": "needed",  # named exactly: the operator chose it
        "CRCR_TEST_ENV_PASSTHROUGH": "VENDOR_LICENSE_SERVER, VENDOR_SDK_*,VENDOR_API_TOKEN",
    }
    for name, value in planted.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "test_names.py").write_text(WRITES_ITS_VARIABLES)
    out = tmp_path / "names.json"
    environment = TestEnvironment.for_device(
        "acme.register", tree, tmpdir=tmp_path / "tmp", extra={"OUT": str(out)}
    )
    # -p no:crcr_reuse: the device module named above does not exist here.
    plain = ["-p", "no:django", "-p", "no:crcr_reuse"]
    completed = PytestRun(environment, tree, extra_args=plain).run(timeout=120)

    assert completed.returncode == 0, completed.stdout + completed.stderr
    names = set(json.loads(out.read_text()))
    never = {"AWS_SECRET_ACCESS_KEY", "AWS_REGION", "DATABASE_URL", "GITHUB_TOKEN",
             "CELERY_RESULT_BACKEND", "CELERY_BROKER_URL", "DJANGO_SETTINGS_MODULE",
             "HTTPS_PROXY", "TORCH_HUB_TOKEN", "SOME_UNRELATED_SETTING", "VENDOR_SDK_TOKEN"}  # fmt: skip
    assert not names & never, names & never
    assert {"PATH", "HOME", "PYTORCH_TEST_WITH_SLOW", "OMP_NUM_THREADS", "ACME_VISIBLE_CORES",
            "VENDOR_LICENSE_SERVER", "VENDOR_SDK_ROOT", "VENDOR_API_TOKEN"} <= names  # fmt: skip
    # What the launcher sets itself is still there.
    assert {"TORCH_ROOT", "PYTHONHASHSEED", "PYTHONPATH", "TMPDIR", "OUT"} <= names


def test_the_reference_devices_own_variables_reach_its_tests_but_not_a_cpu_process(monkeypatch):
    monkeypatch.setenv("CRCR_REFDEV_FAULTS", "/profiles/none.yaml")
    monkeypatch.setenv("CRCR_LLM_KEY_FILE", "/etc/crcr/llm-key")
    device = TestEnvironment.for_device("crcr_reuse.reference_device", Path("/tree"))
    cpu = TestEnvironment.for_device(None, Path("/tree"))

    assert device.variables["CRCR_REFDEV_FAULTS"] == "/profiles/none.yaml"
    assert "CRCR_REFDEV_FAULTS" not in cpu.variables
    assert "CRCR_LLM_KEY_FILE" not in device.variables


def test_a_passthrough_list_that_is_not_names_is_refused(monkeypatch):
    monkeypatch.setenv("CRCR_TEST_ENV_PASSTHROUGH", "GOOD_NAME,*")
    with pytest.raises(ValueError, match="CRCR_TEST_ENV_PASSTHROUGH: '\\*'"):
        TestEnvironment.for_device(None, Path("/tree"))


def test_a_process_runs_only_the_ids_it_is_given_and_writes_the_outputs_asked_for(tmp_path):
    tree = tree_with_a_test(tmp_path)
    ids = tmp_path / "ids.txt"
    ids.write_text("test_env.py::test_second\n")
    environment = TestEnvironment(sys.executable, dict(os.environ, PYTHONPATH=os.getcwd()))
    plain = PytestRun(environment, tree, extra_args=["-p", "no:crcr_reuse", "-p", "no:django"])
    junit, progress = tmp_path / "junit.xml", tmp_path / "progress.jsonl"

    log = tmp_path / "pytest.log"
    process = replace(plain, ids=ids, junit=junit, progress=progress).start(log)

    assert process.wait(timeout=120) == 0, log.read_text()
    finished = [json.loads(line) for line in progress.read_text().splitlines()]
    assert {entry["node_id"] for entry in finished} == {"test_env.py::test_second"}
    assert 'name="test_second"' in junit.read_text()
    assert "test_reports_its_environment" not in junit.read_text()


def test_with_a_config_the_reuse_plugin_gets_the_config_device_tree_and_ids(tmp_path):
    environment = TestEnvironment(sys.executable, {}, "my_backend.register")
    run = PytestRun(
        environment,
        tmp_path,
        configs=[tmp_path / "a.yaml", tmp_path / "b.yaml"],
        ids=tmp_path / "ids.txt",
        test_timeout=30,
    )

    argv = run.argv()

    assert argv[:3] == [sys.executable, "-m", "pytest"]
    assert f"--reuse-ids={tmp_path / 'ids.txt'}" in argv
    assert argv[argv.index("crcr_reuse") - 1] == "-p"
    for option in (
        f"--reuse-config={tmp_path / 'a.yaml'}",
        f"--reuse-config={tmp_path / 'b.yaml'}",
        "--reuse-device=my_backend.register",
        f"--reuse-torch-root={tmp_path}",
        "--reuse-timeout=30",
    ):
        assert option in argv
