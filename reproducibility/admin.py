from django.contrib import admin

from reproducibility import models


@admin.register(models.RunRecord)
class RunRecordAdmin(admin.ModelAdmin):
    list_display = ["run", "config_number", "created_at"]


@admin.register(models.WorkerEnvironment)
class WorkerEnvironmentAdmin(admin.ModelAdmin):
    list_display = ["hostname", "python_version", "torch_version", "os", "cpu_arch", "run", "shard"]


@admin.register(models.Bundle)
class BundleAdmin(admin.ModelAdmin):
    list_display = ["run", "status", "include_artifacts", "size", "created_at", "expires_at"]


@admin.register(models.Rerun)
class RerunAdmin(admin.ModelAdmin):
    list_display = ["original", "run", "created_at"]


@admin.register(models.Bisection)
class BisectionAdmin(admin.ModelAdmin):
    list_display = ["good_run", "bad_run", "status", "first_bad_sha"]
