"""Each config approval names the revision of the change it approved.

Approvals made before this migration approved the change as it is now (a rebase
deleted the older ones), so they are filled with the change's current revision
and still count.
"""

import hashlib

from django.db import migrations, models


def revision_of(change):
    # A copy of ConfigChange.revision as of this migration: historical models have no
    # properties, and a later change to the formula must not rewrite these rows.
    text = f"{change.base.sha256}\n{change.proposed_text}"
    return hashlib.sha256(text.encode()).hexdigest()


def fill_revisions(apps, schema_editor):
    ConfigApproval = apps.get_model("selection", "ConfigApproval")
    for approval in ConfigApproval.objects.select_related("change__base"):
        approval.revision = revision_of(approval.change)
        approval.save(update_fields=["revision"])


class Migration(migrations.Migration):
    dependencies = [
        ("selection", "0004_claim_leases"),
    ]

    operations = [
        migrations.AddField(
            model_name="configapproval",
            name="revision",
            field=models.CharField(
                default="", help_text="the change's revision approved", max_length=64
            ),
            preserve_default=False,
        ),
        migrations.RunPython(fill_revisions, migrations.RunPython.noop),
    ]
