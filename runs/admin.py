from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db import models as db_models
from django.http import HttpRequest
from rest_framework.authtoken.models import TokenProxy

from runs import models

# DRF's token table stays installed for its migrations only: runs.ApiToken holds
# the keys now, hashed, and an admin adding a DRF token would add a dead one.
admin.site.unregister(TokenProxy)


class BackendForm(forms.ModelForm):
    """The backend with its webhook secret write-only: the server needs it in clear
    to check GitHub's HMAC signatures, but the admin never shows it."""

    new_webhook_secret = forms.CharField(
        required=False,
        strip=False,
        max_length=200,
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text="Write-only. Leave empty to keep the current secret.",
    )
    remove_webhook_secret = forms.BooleanField(
        required=False, help_text="Unset the secret: webhooks for this backend are refused."
    )
    relay_sender = forms.ChoiceField(
        choices=models.Backend.RelaySender.choices,
        required=False,  # a form without it keeps the backend's current sender
        widget=forms.RadioSelect,
        label="Who sends the HUD callbacks",
        help_text="PyTorch's relay needs GitHub Actions (relay token: none); the relay worker "
        "is only for relays that accept a static token (the relay simulator, a self-hosted "
        "relay).",
    )

    def clean_relay_sender(self) -> str:
        return self.cleaned_data.get("relay_sender") or self.instance.relay_sender

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("new_webhook_secret") and data.get("remove_webhook_secret"):
            raise forms.ValidationError("Set a new webhook secret or remove it, not both.")
        return data

    def save(self, commit: bool = True) -> Any:
        if secret := self.cleaned_data.get("new_webhook_secret"):
            self.instance.webhook_secret = secret
        elif self.cleaned_data.get("remove_webhook_secret"):
            self.instance.webhook_secret = ""
        return super().save(commit)


@admin.register(models.Backend)
class BackendAdmin(admin.ModelAdmin):
    form = BackendForm
    exclude = ["webhook_secret"]
    # Django 6's default, and what a relay URL is in production.
    formfield_overrides = {db_models.URLField: {"assume_scheme": "https"}}
    list_display = [
        "name",
        "slug",
        "device_module",
        "repository",
        "participation",
        "relay_mode",
        "relay_sender",
        "webhook_secret_set",
    ]
    prepopulated_fields = {"slug": ["name"]}
    readonly_fields = ["webhook_secret_set"]

    def get_fieldsets(self, request: HttpRequest, obj: Any = None) -> Any:
        secret = ["webhook_secret_set", "new_webhook_secret", "remove_webhook_secret"]
        relay = ["relay_mode", "relay_sender", "relay_url", "relay_token"]
        fields = [name for name in self.get_fields(request, obj) if name not in secret + relay]
        return [
            (None, {"fields": fields}),
            (
                "HUD relay",
                {
                    "fields": relay,
                    "description": "PyTorch's relay accepts only an OIDC token that a GitHub "
                    "Actions job mints, so for it workflows in the backend's repository send "
                    "the callbacks and crcr holds no relay credential: the bridge job "
                    "(runs/relay/workflows/crcr-bridge.yml) reports dispatched runs, in either "
                    "mode, and the reporter (crcr-report.yml) claims nightly, release and "
                    "manual runs' self-reports from crcr. crcr's own relay worker sends them "
                    "only for relays that accept a static token: the relay simulator, a "
                    "self-hosted relay.",
                },
            ),
            (
                "GitHub webhook secret",
                {
                    "fields": secret,
                    "description": "crcr keeps this secret to check the X-Hub-Signature-256 "
                    "of GitHub's webhooks; it is never shown, only set, replaced or removed.",
                },
            ),
        ]

    @admin.display(description="webhook secret")
    def webhook_secret_set(self, backend: models.Backend) -> str:
        return "set" if backend.webhook_secret else "not set"


@admin.register(models.ApiToken)
class ApiTokenAdmin(admin.ModelAdmin):
    """Tokens by prefix only: the key is shown once, in the message after adding one.
    Each acts for the backends ticked here (none: for none); deleting one revokes it."""

    list_display = ["prefix", "name", "user", "scope", "created_at", "last_used_at"]
    list_select_related = ["user"]
    list_filter = ["backends"]
    search_fields = ["prefix", "name", "user__username"]
    readonly_fields = ["prefix", "created_at", "last_used_at"]
    filter_horizontal = ["backends"]

    def get_queryset(self, request: HttpRequest) -> Any:
        return super().get_queryset(request).prefetch_related("backends")

    @admin.display(description="acts for")
    def scope(self, token: Any) -> str:
        if token.user.is_superuser:
            return "every backend (a superuser's token)"
        return ", ".join(sorted(backend.slug for backend in token.backends.all())) or "no backend"

    def get_fields(self, request: HttpRequest, obj: Any = None) -> tuple[str, ...]:
        if obj is None:
            return ("user", "name", "backends")
        return ("prefix", "name", "user", "backends", "created_at", "last_used_at")

    def get_readonly_fields(self, request: HttpRequest, obj: Any = None) -> list[str]:
        # A token's key and owner are fixed; a new key is a new token.
        return [*self.readonly_fields, "user"] if obj is not None else []

    def save_model(self, request: HttpRequest, obj: Any, form: Any, change: bool) -> None:
        key = None if change else obj.set_new_key()
        super().save_model(request, obj, form, change)
        if key is not None:
            self.message_user(
                request,
                f"The new token's key is {key} — copy it now: crcr keeps only its hash "
                "and cannot show it again.",
                messages.WARNING,
            )


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
