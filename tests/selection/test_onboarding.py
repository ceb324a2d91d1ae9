"""Onboarding a backend from the command line: the profile and its first config together,
or nothing at all."""

import pytest
from django.core.management import CommandError, call_command

from runs.models import Backend
from selection.models import ConfigVersion
from tests.engine.test_spyre_import import SPYRE

pytestmark = pytest.mark.django_db

CRCR = """test_suite_config:
  files:
    - path: ${TORCH_ROOT}/test/test_plain_reuse.py
      unlisted_test_mode: skip
      tests:
        - names: [TestPlainMath::test_sum]
          mode: mandatory_success
"""
PROFILE = ["--name", "IBM Spyre", "--repository", "torch-spyre/torch-spyre",
           "--device-module", "torch_spyre"]  # fmt: skip


def add(tmp_path, text, *extra, capsys=None):
    config = tmp_path / "first.yaml"
    config.write_text(text)
    call_command("add_backend", "spyre", *PROFILE, "--config", str(config), *extra)


def test_a_backend_and_its_first_config_are_created_together(tmp_path, capsys):
    add(tmp_path, CRCR, "--tracked-release", "release/2.14")
    backend = Backend.objects.get(slug="spyre")
    assert (backend.name, backend.device_module, backend.tracked_release) == (
        "IBM Spyre", "torch_spyre", "release/2.14",
    )  # fmt: skip
    assert backend.relay_sender == "actions" and backend.relay_token == "none"
    version = backend.config_versions.get()
    assert (version.number, version.yaml_text) == (1, CRCR)
    assert "created backend spyre (IBM Spyre) with config v1" in capsys.readouterr().out


def test_a_backend_names_its_device_health_probe_and_a_bad_one_is_refused(tmp_path):
    with pytest.raises(CommandError) as refused:
        add(tmp_path, CRCR, "--health-probe", "torch_spyre.health:probe")
    assert (
        "health_probe: health probe 'torch_spyre.health:probe': write python:MODULE:FUNCTION"
        in (str(refused.value))
    )
    assert not Backend.objects.exists() and not ConfigVersion.objects.exists()
    add(tmp_path, CRCR, "--health-probe", "python:torch_spyre.health:probe")
    assert Backend.objects.get(slug="spyre").health_probe == "python:torch_spyre.health:probe"


def test_a_spyre_config_is_imported_with_its_report(tmp_path, capsys):
    add(tmp_path, SPYRE, "--config-format", "spyre")
    version = ConfigVersion.objects.get(backend__slug="spyre")
    assert "unlisted_test_mode: xfail" in version.yaml_text
    assert "sample_inputs_func" not in version.yaml_text
    assert "imported from Torch Spyre's first.yaml" in version.message
    out = capsys.readouterr().out
    assert "imported 1 Torch Spyre config(s)" in out and "edits.ops.include" in out


def test_bad_input_names_each_problem_and_saves_nothing(tmp_path):
    broken = CRCR.replace("mode: mandatory_success", "mode: sometimes").replace(
        "test_plain_reuse.py", "test_missing.py"
    )
    with pytest.raises(CommandError) as refused:
        add(tmp_path, broken, "--relay-sender", "worker", "--relay-token", "oidc")
    message = str(refused.value)
    assert message.startswith("nothing was saved:")
    assert "first.yaml:3:" in message and "test_missing.py' matches no file" in message
    assert "first.yaml:7:17: mode must be one of" in message
    assert "relay_sender: a Celery worker cannot mint" in message
    assert not Backend.objects.exists() and not ConfigVersion.objects.exists()
    # A crcr config named as Spyre's is read with Spyre's meaning; a Spyre config named as
    # crcr's is refused by the strict loader, pointing at the importer.
    with pytest.raises(CommandError, match="import-spyre"):
        add(tmp_path, SPYRE)
    assert not Backend.objects.exists()


def upload(text: str, name: str = "first.yaml"):
    from django.core.files.uploadedfile import SimpleUploadedFile

    return SimpleUploadedFile(name, text.encode(), content_type="application/yaml")


FORM = {
    "slug": "spyre", "name": "IBM Spyre", "repository": "torch-spyre/torch-spyre",
    "device_module": "torch_spyre", "version": "0.1.0", "tracked_release": "",
    "participation": "all", "relay_url": "", "relay_mode": "aggregate", "relay_sender": "actions", "relay_token": "none",
}  # fmt: skip


def test_the_page_is_for_admins_and_adds_a_backend_from_a_spyre_config(client):
    from tests.factories import make_user

    client.force_login(make_user("rita", role="reviewer"))
    assert client.get("/backends/new/").status_code == 403
    client.force_login(make_user("ada", role="admin"))
    page = client.get("/backends/new/").content.decode()
    assert "Add a backend" in page and 'type="file"' in page
    sent = FORM | {"config": upload(SPYRE), "config_format": "spyre", "relay_url": "relay.example"}
    done = client.post("/backends/new/", sent)
    assert done.status_code == 201
    html = done.content.decode()
    assert "Backend <code>spyre</code> created with config v1" in html
    assert "edits.ops.include" in html and 'href="/configs/spyre/"' in html
    version = ConfigVersion.objects.get(backend__slug="spyre")
    assert version.created_by.username == "ada"
    assert version.backend.relay_url == "https://relay.example"  # a bare host is https


def test_the_page_shows_each_problem_next_to_its_field_and_saves_nothing(client):
    from tests.factories import make_user

    client.force_login(make_user("ada", role="admin"))
    bad = CRCR.replace("test_plain_reuse.py", "test_missing.py")
    refused = client.post(
        "/backends/new/",
        FORM | {"slug": "not a slug", "config": upload(bad), "config_format": "crcr"},
    )
    assert refused.status_code == 400
    html = refused.content.decode()
    assert "Enter a valid “slug”" in html
    assert "test_missing.py&#x27; matches no file" in html
    assert not Backend.objects.exists() and not ConfigVersion.objects.exists()


@pytest.mark.parametrize("width", [1440, 1024])
def test_the_page_in_the_browser_labels_every_control_and_fits(
    page, transactional_db, width, tmp_path
):
    from tests.crcr_site.test_polish import UNNAMED
    from tests.factories import make_user
    from tests.selection.test_review_browser import sign_in

    make_user("ada", role="admin")
    page.set_viewport_size({"width": width, "height": 800})
    sign_in(page, "ada")
    page.get_by_role("link", name="Add backend").click()
    assert page.evaluate(UNNAMED) == []
    broken = tmp_path / "first.yaml"
    broken.write_text(CRCR.replace("test_plain_reuse.py", "test_missing.py"))
    page.get_by_label("Slug").fill("spyre")
    page.get_by_label("Name", exact=True).fill("IBM Spyre")
    page.get_by_label("Repository").fill("torch-spyre/torch-spyre")
    page.get_by_label("Device module").fill("torch_spyre")
    page.get_by_label("First config file").set_input_files(str(broken))
    page.get_by_role("button", name="Add the backend").click()
    error = page.get_by_role("alert").filter(has_text="matches no file")
    assert error.is_visible()
    assert page.evaluate("document.documentElement.scrollWidth") <= width
    if width == 1024:
        page.screenshot(path=str(tmp_path.parent / "onboarding-1024.png"), full_page=True)
    assert not Backend.objects.exists()
