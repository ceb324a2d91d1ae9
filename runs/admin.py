from django.contrib import admin

from runs import models


@admin.register(models.Backend)
class BackendAdmin(admin.ModelAdmin):
    list_display = ["name", "slug", "device_module", "repository", "relay_mode"]
    prepopulated_fields = {"slug": ["name"]}


@admin.register(models.Dispatch)
class DispatchAdmin(admin.ModelAdmin):
    list_display = ["delivery_id", "event_type", "action", "pr_number", "verdict", "received_at"]
    list_filter = ["verdict", "event_type", "backend"]
    search_fields = ["delivery_id", "head_sha"]


@admin.register(models.Trigger)
class TriggerAdmin(admin.ModelAdmin):
    list_display = ["kind", "ref", "pytorch_sha", "backend", "created_at"]
    list_filter = ["kind"]


@admin.register(models.Artifact)
class ArtifactAdmin(admin.ModelAdmin):
    list_display = ["name", "kind", "version", "sha256", "size"]


class ShardInline(admin.TabularInline):
    model = models.Shard
    fields = ["index", "status", "attempts", "estimated_seconds", "worker", "exit_code"]
    extra = 0


@admin.register(models.Run)
class RunAdmin(admin.ModelAdmin):
    list_display = ["job_name", "pytorch_sha", "status", "created_at"]
    list_filter = ["status", "backend"]
    inlines = [ShardInline]


@admin.register(models.TestResult)
class TestResultAdmin(admin.ModelAdmin):
    list_display = ["node_id", "outcome", "attempt", "duration", "run"]
    list_filter = ["outcome"]
    search_fields = ["node_id"]


@admin.register(models.Failure)
class FailureAdmin(admin.ModelAdmin):
    list_display = ["result", "category", "verdict", "op_name"]
    list_filter = ["category", "verdict"]


@admin.register(models.TestDuration)
class TestDurationAdmin(admin.ModelAdmin):
    list_display = ["test_id", "device", "seconds", "samples"]
    search_fields = ["test_id"]


@admin.register(models.RelayCallback)
class RelayCallbackAdmin(admin.ModelAdmin):
    list_display = ["job_name", "transition", "status", "attempts", "last_status_code"]
    list_filter = ["status", "transition"]
