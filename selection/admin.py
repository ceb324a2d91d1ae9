from crcr_reuse.yaml_limits import YamlLimitError, check
from django import forms
from django.contrib import admin

from selection import models


@admin.register(models.InventorySnapshot)
class InventorySnapshotAdmin(admin.ModelAdmin):
    list_display = ["pytorch_sha", "root", "created_at"]


@admin.register(models.TestFile)
class TestFileAdmin(admin.ModelAdmin):
    list_display = ["path", "snapshot", "content_hash"]
    search_fields = ["path"]


@admin.register(models.UpstreamTest)
class UpstreamTestAdmin(admin.ModelAdmin):
    list_display = ["class_name", "test_name", "file"]
    search_fields = ["test_name", "class_name"]


@admin.register(models.OpUsage)
class OpUsageAdmin(admin.ModelAdmin):
    list_display = ["op", "class_name", "test_name", "source", "is_helper"]
    list_filter = ["source", "is_helper"]
    search_fields = ["op", "test_name"]


def _bounded(text: str, field: str) -> str:
    """A config text an admin typed, refused past the YAML limits before it is stored
    (runs, config PRs and the pipeline read it later)."""
    try:
        check(text, field, ruamel=True)
    except YamlLimitError as error:
        raise forms.ValidationError(str(error)) from None
    return text


class ConfigVersionForm(forms.ModelForm):
    class Meta:
        model = models.ConfigVersion
        fields = [
            "backend", "number", "parent", "yaml_text", "sha256", "message", "created_by",
            "created_at",
        ]  # fmt: skip

    def clean_yaml_text(self) -> str:
        return _bounded(self.cleaned_data["yaml_text"], "yaml_text")


@admin.register(models.ConfigVersion)
class ConfigVersionAdmin(admin.ModelAdmin):
    form = ConfigVersionForm
    list_display = ["backend", "number", "sha256", "created_at"]


class ConfigChangeForm(forms.ModelForm):
    class Meta:
        model = models.ConfigChange
        fields = [
            "backend", "title", "base", "proposed_text", "status", "author", "merged_version",
            "created_at", "merged_at",
        ]  # fmt: skip

    def clean_proposed_text(self) -> str:
        return _bounded(self.cleaned_data["proposed_text"], "proposed_text")


class ConfigApprovalInline(admin.TabularInline):
    model = models.ConfigApproval
    extra = 0


@admin.register(models.ConfigChange)
class ConfigChangeAdmin(admin.ModelAdmin):
    form = ConfigChangeForm
    list_display = ["title", "backend", "status", "created_at"]
    list_filter = ["status"]
    inlines = [ConfigApprovalInline]


@admin.register(models.Proposal)
class ProposalAdmin(admin.ModelAdmin):
    list_display = ["class_name", "test_name", "mode", "stage", "status"]
    list_filter = ["mode", "stage", "status"]
    search_fields = ["test_name", "file_path", "reason"]
