import django.db.models.deletion
from django.db import migrations, models


def scope_existing_tokens(apps, schema_editor):
    """On a site with one backend, every existing token is scoped to it: no other team's
    backend exists to reach, and its clients keep working. With several backends an
    existing token acts for none until an admin scopes it (`manage.py tokens scope`):
    which team's it is cannot be guessed, and guessing all would keep the hole open."""
    Backend = apps.get_model("runs", "Backend")
    ApiToken = apps.get_model("runs", "ApiToken")
    backends = list(Backend.objects.all()[:2])
    if len(backends) == 1:
        for token in ApiToken.objects.all():
            token.backends.add(backends[0])


class Migration(migrations.Migration):
    """API tokens scoped to backends; a reporter's lease held by the token that claimed it."""

    dependencies = [
        ("runs", "0020_trigger_labels"),
    ]

    operations = [
        migrations.AddField(
            model_name="apitoken",
            name="backends",
            field=models.ManyToManyField(
                blank=True,
                help_text="the backends this token acts for (dispatches, attempts, relay claims, runs, bundles); none: it acts for none. A superuser's token acts for every backend.",
                related_name="api_tokens",
                to="runs.backend",
            ),
        ),
        migrations.AddField(
            model_name="relaycallback",
            name="lease_holder",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.SET_NULL,
                related_name="+",
                to="runs.apitoken",
            ),
        ),
        migrations.RunPython(scope_existing_tokens, migrations.RunPython.noop),
    ]
