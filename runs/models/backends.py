"""Backends: the out-of-tree accelerator backends crcr tests and reports for."""

from crcr_reuse.health_probe import HealthProbe, ProbeError
from django.core.exceptions import ValidationError
from django.db import models
from django.utils import timezone

from runs.relay import delivery, policy

# The dispatch kinds (`Dispatch.kind_of`) a nightly-only backend takes.
NIGHTLY_KINDS = ("nightly", "release")


def validate_health_probe(spec: str) -> None:
    """A health probe setting the test processes could use (its syntax; the callable or
    program itself is looked for in the test process, which stops with a usage error)."""
    if spec.strip():
        try:
            HealthProbe.parse(spec)
        except ProbeError as error:
            raise ValidationError(str(error)) from None


class Backend(models.Model):
    """An out-of-tree accelerator backend and how crcr treats it."""

    class RelayMode(models.TextChoices):
        PER_JOB = "per_job", "per job (each shard is a HUD job)"
        AGGREGATE = "aggregate", "aggregate (one HUD job per run)"

    class RelaySender(models.TextChoices):
        """Who sends the callbacks: PyTorch's relay takes only an OIDC token that a GitHub
        Actions job mints, so only Actions jobs can reach it (the bridge job reports dispatched
        runs, the reporter claims self-reports from the outbox); a worker cannot."""

        ACTIONS = (
            "actions",
            "GitHub Actions: the bridge job (crcr-bridge.yml) for dispatched runs, the reporter "
            "(crcr-report.yml) for nightly, release and manual runs: PyTorch's relay",
        )
        WORKER = "worker", "crcr's relay worker: only for relays that accept a static token"

    class Participation(models.TextChoices):
        """Which dispatches the backend takes. Upstream allowlists a repository at L2 that
        takes only nightly dispatches: nightly-only participation."""

        ALL = "all", "every dispatch: pull requests, pushes, nightly and release"
        NIGHTLY = "nightly", "nightly and release dispatches only"

    slug = models.SlugField(unique=True)
    name = models.CharField(max_length=200)
    device_module = models.CharField(
        max_length=200, help_text="Python module that registers the privateuse1 backend"
    )
    health_probe = models.CharField(
        max_length=300,
        blank=True,
        validators=[validate_health_probe],
        help_text="the device's health probe, run between tests: python:MODULE:FUNCTION or "
        "command:PROGRAM [ARGS]; when it fails the shard's attempt ends as infrastructure and "
        "a fresh attempt runs the rest. Empty: no probe. The reference device's: "
        "python:crcr_reuse.reference_device:probe",
    )
    repository = models.CharField(max_length=200, help_text="owner/name on GitHub")
    version = models.CharField(max_length=100, default="0.0.0")
    extra_versions = models.JSONField(
        default=list, blank=True, help_text="other backend versions tested against each SHA"
    )
    extension_points = models.JSONField(
        default=list, blank=True, help_text="hooked areas: eager, autograd, inductor, …"
    )
    scope_preference = models.TextField(blank=True, help_text='e.g. "no autograd yet"')
    gate_policy = models.JSONField(default=dict, blank=True)
    tracked_release = models.CharField(max_length=100, blank=True, help_text="release/X.Y")
    participation = models.CharField(
        max_length=10,
        choices=Participation.choices,
        default=Participation.ALL,
        help_text="nightly and release only: the intake records every other dispatch as "
        "rejected, with the reason, and runs nothing for it; the HUD shows its nightly and "
        "release commits only",
    )
    relay_mode = models.CharField(
        max_length=20, choices=RelayMode.choices, default=RelayMode.AGGREGATE
    )
    relay_sender = models.CharField(
        max_length=10,
        choices=RelaySender.choices,
        default=RelaySender.WORKER,
        help_text="who sends this backend's HUD callbacks to the relay",
    )
    relay_url = models.URLField(
        blank=True, help_text="CRCR callback endpoint; empty: this backend reports nothing"
    )
    relay_token = models.CharField(
        max_length=300,
        default="none",
        help_text="file:/path/to/token or none: the relay worker's credential (none with "
        "GitHub Actions, whose jobs mint their own)",
    )
    webhook_secret = models.CharField(max_length=200, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return self.name

    @property
    def nightly_only(self) -> bool:
        return self.participation == self.Participation.NIGHTLY

    def refusal(self, kind: str, ref: str) -> str:
        """Why the backend refuses a dispatch of this kind (`Dispatch.kind_of`), or ""."""
        if not self.nightly_only or kind in NIGHTLY_KINDS:
            return ""
        what = "a pull request" if kind == "pull_request" else f"a push to {ref}"
        return (
            f"{self.name} takes nightly and release dispatches only (nightly-only "
            f"participation): {what} is not run"
        )

    @staticmethod
    def level_of(relay_url: str, relay_sender: str) -> str:
        """The CRCR level crcr can tell of a backend (upstream's allowlist grants it):
        L2 when its jobs reach the HUD (a relay URL, or GitHub Actions sending them), else
        L1 (dispatches in, nothing reported). L3 is upstream's to grant on RFC 102's bar:
        the readiness panel (`runs.readiness`) says how far a backend is from it."""
        reports = bool(relay_url) or relay_sender == Backend.RelaySender.ACTIONS
        return "L2" if reports else "L1"

    @property
    def sends_itself(self) -> bool:
        return self.relay_sender == self.RelaySender.WORKER

    def clean(self) -> None:
        """A relay token spec the relay worker could never use is refused where it is typed
        (a token file outside CRCR_SECRETS_DIR, a relay URL off CRCR_RELAY_URL_ALLOWLIST too),
        and so is a credential crcr should not hold: with GitHub Actions as the sender the
        workers hold none, and a worker cannot mint the OIDC token PyTorch's relay wants."""
        problem = delivery.check_token_spec(self.relay_token, absolute=True)
        if problem:
            raise ValidationError({"relay_token": problem})
        if self.relay_sender == self.RelaySender.ACTIONS and self.relay_token.startswith("file:"):
            raise ValidationError(
                {
                    "relay_token": "with GitHub Actions as the sender crcr holds no relay "
                    "credential (the bridge and the reporter mint their own OIDC token): set none"
                }
            )
        if self.relay_sender == self.RelaySender.WORKER and self.relay_token == "oidc":
            raise ValidationError(
                {
                    "relay_sender": "a Celery worker cannot mint a GitHub Actions OIDC token: "
                    "for PyTorch's relay choose GitHub Actions (and relay token none); the "
                    "relay worker is only for relays that accept a static token"
                }
            )
        # crcr itself sends only with its relay worker; an Actions workflow posts to its own
        # RELAY_URL, so this URL is never fetched by crcr then.
        problem = policy.url_problem(self.relay_url) if self.sends_itself else None
        if problem:
            raise ValidationError({"relay_url": problem})
        problem = policy.token_problem(self.relay_token)
        if problem:
            raise ValidationError({"relay_token": problem})
