import hashlib

import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


def move_drf_tokens(apps, schema_editor):
    """Each DRF token becomes an ApiToken holding its key's SHA-256 (so the key
    still authenticates), and the plain-text row is deleted."""
    Token = apps.get_model("authtoken", "Token")
    ApiToken = apps.get_model("runs", "ApiToken")
    for token in Token.objects.all():
        ApiToken.objects.create(
            user_id=token.user_id,
            name="moved from the plain-text token table",
            prefix=token.key[:8],
            digest=hashlib.sha256(token.key.encode()).hexdigest(),
            created_at=token.created,
        )
    Token.objects.all().delete()


class Migration(migrations.Migration):
    """API tokens stored as digests; existing DRF tokens are moved over.

    Going back drops the new table and cannot restore the plain-text keys:
    tokens must then be issued again (`create_user NAME --role machine --token`).
    """

    dependencies = [
        ("runs", "0012_claim_leases"),
        ("authtoken", "0004_alter_tokenproxy_options"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name="ApiToken",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("name", models.CharField(blank=True, help_text="what the token is for", max_length=100)),
                ("prefix", models.CharField(editable=False, help_text="the key's first characters", max_length=8)),
                ("digest", models.CharField(editable=False, max_length=64, unique=True)),
                ("created_at", models.DateTimeField(default=django.utils.timezone.now, editable=False)),
                ("last_used_at", models.DateTimeField(blank=True, editable=False, null=True)),
                ("user", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="api_tokens", to=settings.AUTH_USER_MODEL)),
            ],
            options={
                "verbose_name": "API token",
                "ordering": ["-created_at"],
            },
        ),
        migrations.RunPython(move_drf_tokens, migrations.RunPython.noop),
    ]
