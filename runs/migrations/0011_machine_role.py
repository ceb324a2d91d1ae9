from django.db import migrations


def create_role(apps, schema_editor):
    apps.get_model("auth", "Group").objects.get_or_create(name="machine")


def drop_role(apps, schema_editor):
    apps.get_model("auth", "Group").objects.filter(name="machine").delete()


class Migration(migrations.Migration):
    """The machine role: tokens that may post dispatches."""

    dependencies = [("runs", "0010_webhook_replays")]
    operations = [migrations.RunPython(create_role, drop_role)]
