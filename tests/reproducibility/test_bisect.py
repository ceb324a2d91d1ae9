"""Bisect finds the upstream commit that broke a test, or stops saying why."""

from datetime import timedelta

import pytest
from django.conf import settings as django_settings

from demo.localgit import PyTorchShapedRepo
from reproducibility import bisect
from reproducibility.models import Bisection
from runs import artifacts, crash_pinning
from tests.builds import DEVICE_MODULE, reference_build
from tests.factories import make_backend, make_config, make_user
from tests.reproducibility.builders import add_result, make_run

pytestmark = pytest.mark.django_db

NODE = "test/test_tiny.py::TestTinyPRIVATEUSE1::test_add_privateuseone"
CONFIG = """test_suite_config:
  files:
    - path: ${TORCH_ROOT}/test/test_tiny.py
      unlisted_test_mode: mandatory_success
"""
TINY_TEST = """# An upstream-style device-type test, as PyTorch writes them.
import torch
from torch.testing._internal.common_device_type import instantiate_device_type_tests
from torch.testing._internal.common_utils import TestCase, run_tests


class TestTiny(TestCase):
    def test_add(self, device):
        x = torch.ones(3, device=device)
        self.assertEqual((x + x).cpu(), torch.full((3,), EXPECTED))


instantiate_device_type_tests(TestTiny, globals())

if __name__ == "__main__":
    run_tests()
"""


def tiny_test(expected: str) -> str:
    return TINY_TEST.replace("EXPECTED", expected)


def planted_upstream(tmp_path, settings, planted: str, files: dict[str, str]):
    """A clone and its SHAs: good, then five commits, the third of which (`planted`)
    changes `files`; `shas["planted"]` is it, `shas["bad"]` the last commit."""
    repo = PyTorchShapedRepo(tmp_path / "pytorch")
    shas = {"good": repo.commit("main", "Add a tiny test (#1)", {
        "pytest.ini": "[pytest]\n", "test/test_tiny.py": tiny_test("2.0")})}  # fmt: skip
    for n, message in enumerate(["Docs (#2)", "Refactor (#3)", planted, "More docs (#5)",
                                 "Bump version (#6)"]):  # fmt: skip
        shas[f"c{n + 1}"] = repo.commit("main", message, files if message == planted else None)
    shas["planted"], shas["bad"] = shas["c3"], shas["c5"]
    settings.CRCR_TORCH_ROOT = repo.path
    settings.CRCR_UPSTREAM = f"git:{repo.path}"
    settings.MEDIA_ROOT = str(tmp_path / "storage")
    settings.CRCR_BUILD_COMMAND = None
    return repo, shas


@pytest.fixture
def upstream(tmp_path, settings) -> dict[str, str]:
    """The third commit after good breaks test_add's expectation; bad is the last."""
    changed = {"test/test_tiny.py": tiny_test("3.0")}
    return planted_upstream(tmp_path, settings, "Change add's expectation (#4)", changed)[1]


def green_and_red(shas: dict[str, str], config_text: str = CONFIG, backend=None):
    backend = backend or make_backend("acme")
    config = make_config(backend, CONFIG)
    good = make_run(backend, config, shas["good"], "passed")
    bad_config = config if config_text == CONFIG else make_config(backend, config_text)
    bad = make_run(backend, bad_config, shas["bad"], "failed")
    bad.created_at = good.created_at + timedelta(hours=1)
    bad.save()
    add_result(good, NODE, ["passed"])
    add_result(bad, NODE, ["failed"], "numerical_mismatch", "regression")
    return good, bad


def test_bisect_finds_the_planted_commit_and_shows_its_steps(upstream, client):
    good, bad = green_and_red(upstream)
    bisection = bisect.start(bad, user=make_user("rita", role="reviewer"))
    assert bisection.status == Bisection.Status.QUEUED and bisection.test_ids == [NODE]
    bisect.run(bisection.pk)
    bisection.refresh_from_db()
    assert bisection.status == Bisection.Status.FOUND, bisection.message
    assert bisection.first_bad_sha == upstream["planted"]
    assert bisection.commits == [upstream[f"c{n}"] for n in range(1, 6)]
    tested = [step for step in bisection.steps if step["tested"]]
    assert [(s["sha"], s["verdict"]) for s in tested] == [
        (upstream["c2"], "good"),
        (upstream["planted"], "bad"),
    ]
    assert tested[1]["outcomes"] == {NODE: "failed"}
    assert "Change add's expectation (#4)" in bisection.message
    client.force_login(make_user("vera"))
    page = client.get(f"/bisections/{bisection.uuid}/").content.decode()
    assert f"<code>{upstream['planted']}</code>" in page and "first bad" in page
    assert "Change add&#x27;s expectation (#4)" in page and "3 of 5" in page
    polled = client.get(f"/bisections/{bisection.uuid}/", HTTP_HX_REQUEST="true")
    assert polled.status_code == 286  # finished: htmx stops polling


def test_without_a_git_checkout_commits_cannot_be_built_and_the_bisect_stops(upstream, settings):
    settings.CRCR_TORCH_ROOT = django_settings.BASE_DIR / "tests" / "upstream"
    _, bad = green_and_red(upstream)
    bisection = bisect.run(bisect.start(bad).pk)
    assert bisection.status == Bisection.Status.STOPPED and bisection.first_bad_sha == ""
    assert "cannot be built here" in bisection.message
    assert "is not a git checkout" in bisection.message


def test_a_commit_the_test_tree_cannot_check_out_stops_the_bisect(upstream, tmp_path, settings):
    settings.CRCR_TORCH_ROOT = PyTorchShapedRepo(tmp_path / "unrelated-clone").path
    _, bad = green_and_red(upstream)
    bisection = bisect.run(bisect.start(bad).pk)
    assert bisection.status == Bisection.Status.STOPPED
    assert f"commit {upstream['c2'][:12]} cannot be built here" in bisection.message


def test_runs_that_differ_in_more_than_the_pytorch_sha_are_not_bisected(upstream):
    _, bad = green_and_red(upstream, CONFIG + "# another config version\n")
    with pytest.raises(bisect.BisectError, match="config version as well as the PyTorch SHA"):
        bisect.start(bad)
    assert not Bisection.objects.exists()


def test_a_test_missing_or_skipped_at_a_commit_is_neither_good_nor_bad():
    absent = crash_pinning.TestRecord(NODE, "error", message="not collected: unknown test id")
    assert bisect.judge("f" * 40, [absent])[0] == "unknown"
    assert bisect.judge("f" * 40, [crash_pinning.TestRecord(NODE, "skipped")])[0] == "unknown"
    assert bisect.judge("f" * 40, [crash_pinning.TestRecord(NODE, "crashed")])[0] == "bad"
    assert bisect.judge("f" * 40, [crash_pinning.TestRecord(NODE, "passed")])[0] == "good"


def test_a_redelivered_bisection_task_does_nothing(upstream):
    _, bad = green_and_red(upstream)
    bisection = bisect.start(bad)
    Bisection.objects.filter(pk=bisection.pk).update(status=Bisection.Status.RUNNING)
    assert bisect.run(bisection.pk) is None


# PyTorch core at a commit, as the reference build compiles it into the backend: from the
# culprit on, `add` is off by one on the device. The test files never change.
BROKEN_CORE = "faults:\n  - op: add\n    kind: deviation\n    amount: 1.0\n"


@pytest.fixture
def core_upstream(tmp_path, settings) -> dict[str, str]:
    """The third commit after good breaks `add` in core, not in the tests; a build command
    builds each commit."""
    changed = {"crcr/refdev_faults.yaml": BROKEN_CORE}
    repo, shas = planted_upstream(tmp_path, settings, "Rewrite add's kernel (#4)", changed)
    settings.CRCR_BUILD_COMMAND = reference_build(repo.path)
    return shas


def test_with_a_build_command_bisect_builds_each_commit_and_finds_the_culprit_in_core(
    core_upstream, settings, client, tmp_path
):
    backend = make_backend("acme", device_module=DEVICE_MODULE)
    good, bad = green_and_red(core_upstream, backend=backend)
    # An older run of the same backend version built c2 already: bisect reuses that build.
    earlier = make_run(backend, good.config_version, core_upstream["c2"], "passed")
    earlier.created_at = good.created_at - timedelta(days=1)
    earlier.save()
    earlier.artifacts.set(artifacts.build(core_upstream["c2"], backend, "0.0.0", tmp_path / "log"))

    bisection = bisect.run(bisect.start(bad).pk)
    assert bisection.status == Bisection.Status.FOUND, bisection.message
    assert bisection.first_bad_sha == core_upstream["planted"]
    assert "Rewrite add's kernel (#4)" in bisection.message
    tested = [step for step in bisection.steps if step["tested"]]
    # The evidence: the test fails at the culprit and passes at its parent, each in the
    # environment of that commit's build.
    assert [(s["sha"], s["verdict"], s["built"]) for s in tested] == [
        (core_upstream["c2"], "good", False),
        (core_upstream["planted"], "bad", True),
    ]
    assert tested[0]["outcomes"] == {NODE: "passed"} and tested[1]["outcomes"] == {NODE: "failed"}
    assert set(tested[0]["artifacts"]) == {a.sha256 for a in earlier.artifacts.all()}
    assert tested[0]["artifacts"] != tested[1]["artifacts"]  # the backend built against c3
    client.force_login(make_user("vera"))
    page = client.get(f"/bisections/{bisection.uuid}/").content.decode()
    assert "built for this step" in page and "an earlier build reused" in page


def test_a_bisection_past_its_cap_of_builds_stops_naming_the_cap_and_the_open_range(
    core_upstream, settings, tmp_path
):
    backend = make_backend("acme", device_module=DEVICE_MODULE)
    _, bad = green_and_red(core_upstream, backend=backend)
    settings.CRCR_BISECT_MAX_BUILDS = 1
    bisection = bisect.start(bad)
    bisection.commits = [core_upstream[f"c{n}"] for n in range(1, 6)]
    bisection.add_step({"index": 1, "sha": core_upstream["c2"], "verdict": "good",
                        "tested": True, "built": True})  # fmt: skip
    with pytest.raises(bisect.Stop) as stopped:
        bisect.artifacts_at(bisection, core_upstream["c3"], tmp_path)
    assert str(stopped.value) == (
        f"building commit {core_upstream['c3'][:12]} would pass the cap of 1 build(s) a "
        "bisection (CRCR_BISECT_MAX_BUILDS); the first bad commit is one of 3 commit(s): "
        + ", ".join(core_upstream[f"c{n}"][:12] for n in (3, 4, 5))
    )
