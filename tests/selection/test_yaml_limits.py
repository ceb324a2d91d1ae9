"""Every way a YAML text enters crcr refuses one past the YAML limits before anything
expands it, and stores nothing: the onboarding page and command, the admin's config
versions and config PRs, and the config writer reading a stored config (config PRs, the
pipeline)."""

import pytest
from crcr_reuse.yaml_limits import MAX_BYTES
from django.core.management import CommandError, call_command

from runs.models import Backend
from selection import configwriter
from selection.models import ConfigChange, ConfigVersion
from tests.engine.test_yaml_limits import alias_bomb_crcr, billion_laughs_spyre, sample_bomb_spyre
from tests.factories import make_backend, make_config, make_user
from tests.selection.test_onboarding import FORM, PROFILE, upload

pytestmark = pytest.mark.django_db

BOMBS = {
    "crcr": alias_bomb_crcr,
    "spyre": billion_laughs_spyre,
    "spyre-sample": sample_bomb_spyre,
}


@pytest.mark.parametrize("kind", BOMBS)
def test_the_onboarding_page_refuses_an_alias_bomb_inline_and_saves_nothing(client, kind):
    client.force_login(make_user("ada", role="admin"))
    refused = client.post(
        "/backends/new/",
        FORM | {"config": upload(BOMBS[kind]()), "config_format": kind.split("-")[0]},
    )
    assert refused.status_code == 400
    html = refused.content.decode()
    assert "first.yaml:" in html and "(MAX_NODES) with aliases expanded" in html
    assert not Backend.objects.exists() and not ConfigVersion.objects.exists()


def test_the_onboarding_page_refuses_a_file_past_the_size_limit_unread(client):
    client.force_login(make_user("ada", role="admin"))
    big = "test_suite_config:\n  files: []\n#" + "x" * MAX_BYTES + "\n"
    refused = client.post("/backends/new/", FORM | {"config": upload(big)})
    assert refused.status_code == 400
    assert "over the limit of 8,388,608 bytes (MAX_BYTES)" in refused.content.decode()
    assert not Backend.objects.exists()


def test_the_onboarding_command_refuses_an_alias_bomb_and_saves_nothing(tmp_path):
    config = tmp_path / "first.yaml"
    config.write_text(alias_bomb_crcr())
    with pytest.raises(CommandError) as refused:
        call_command("add_backend", "spyre", *PROFILE, "--config", str(config))
    assert str(refused.value).startswith("nothing was saved:")
    assert "first.yaml:" in str(refused.value) and "(MAX_NODES)" in str(refused.value)
    assert not Backend.objects.exists() and not ConfigVersion.objects.exists()


def _admin(client):
    admin = make_user("root", role=None)
    admin.is_staff = admin.is_superuser = True
    admin.save()
    client.force_login(admin)
    return admin


def test_an_admin_cannot_store_a_config_version_past_the_limits(client):
    _admin(client)
    backend = make_backend()
    refused = client.post(
        "/admin/selection/configversion/add/",
        {
            "backend": backend.pk, "number": 1, "yaml_text": billion_laughs_spyre(),
            "sha256": "0" * 64, "message": "", "created_at_0": "2026-01-01",
            "created_at_1": "00:00:00",
        },
    )  # fmt: skip
    assert refused.status_code == 200  # the form again, with the error
    assert "yaml_text:" in refused.content.decode() and "(MAX_NODES)" in refused.content.decode()
    assert not ConfigVersion.objects.exists()


def test_an_admin_cannot_put_a_bomb_into_a_config_pr(client):
    _admin(client)
    base = make_config(make_backend())
    refused = client.post(
        "/admin/selection/configchange/add/",
        {
            "backend": base.backend.pk, "title": "t", "base": base.pk,
            "proposed_text": alias_bomb_crcr(), "status": "open",
            "created_at_0": "2026-01-01", "created_at_1": "00:00:00",
            "approvals-TOTAL_FORMS": 0, "approvals-INITIAL_FORMS": 0,
        },
    )  # fmt: skip
    assert refused.status_code == 200
    assert (
        "proposed_text:" in refused.content.decode() and "(MAX_NODES)" in refused.content.decode()
    )
    assert not ConfigChange.objects.exists()


def test_the_config_writer_refuses_a_stored_config_past_the_limits():
    decision = configwriter.Decision("test/test_x.py", "TestX", "test_y", "xfail", "why")
    with pytest.raises(
        configwriter.ConfigWriteError, match=r"^the parent config:\d+:\d+: YAML limit: .*MAX_NODES"
    ):
        configwriter.apply(alias_bomb_crcr(), [decision])
