"""DRF serializers: the shapes machines send and receive."""

import re
from typing import Any

from rest_framework import serializers

from runs.models import Dispatch, RelayCallback, Run
from runs.relay import outbox

SHA = re.compile(r"^[0-9a-f]{40}$")


class RunSerializer(serializers.ModelSerializer):
    backend = serializers.CharField(source="backend.slug", read_only=True)
    url = serializers.SerializerMethodField()
    test_results = serializers.SerializerMethodField()
    attempt_of = serializers.SerializerMethodField(help_text="the first attempt's run")

    class Meta:
        model = Run
        fields = [
            "uuid",
            "backend",
            "job_name",
            "pytorch_sha",
            "backend_version",
            "status",
            "run_attempt",
            "attempt_of",
            "created_at",
            "started_at",
            "finished_at",
            "url",
            "test_results",
        ]

    def get_url(self, run: Run) -> str:
        return run.page_url()

    def get_test_results(self, run: Run) -> dict[str, int] | None:
        return run.test_counts() if run.is_finished else None

    def get_attempt_of(self, run: Run) -> str | None:
        return str(run.retry_of.uuid) if run.retry_of else None


class RunDetailSerializer(RunSerializer):
    """A run with its HUD jobs, in the words a GitHub Actions bridge reports them."""

    hud_jobs = serializers.SerializerMethodField()

    class Meta(RunSerializer.Meta):
        fields = [*RunSerializer.Meta.fields, "hud_jobs"]

    def get_hud_jobs(self, run: Run) -> list[dict[str, Any]] | None:
        # Only a dispatched run has HUD jobs of its own (the rest self-report).
        return outbox.hud_jobs(run) if run.trigger.dispatch_id else None


class _RefSerializer(serializers.Serializer):
    ref = serializers.CharField(max_length=200)
    sha = serializers.RegexField(SHA, error_messages={"invalid": "must be a 40-hex commit SHA"})


class _LabelSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=200)


class _RepositorySerializer(serializers.Serializer):
    full_name = serializers.CharField(max_length=200)


class _PullRequestSerializer(serializers.Serializer):
    # The column is PostgreSQL's integer: a larger number would overflow it.
    number = serializers.IntegerField(min_value=1, max_value=2**31 - 1)
    head = _RefSerializer()
    base = _RefSerializer()
    labels = _LabelSerializer(many=True)
    merged = serializers.BooleanField(required=False, allow_null=True)


class PullRequestPayloadSerializer(serializers.Serializer):
    action = serializers.CharField(max_length=40)
    pull_request = _PullRequestSerializer()
    repository = _RepositorySerializer()


class PushPayloadSerializer(serializers.Serializer):
    ref = serializers.CharField(max_length=200)
    after = serializers.RegexField(SHA, error_messages={"invalid": "must be a 40-hex commit SHA"})
    deleted = serializers.BooleanField(default=False)
    repository = _RepositorySerializer()


PAYLOAD_SERIALIZERS = {"pull_request": PullRequestPayloadSerializer, "push": PushPayloadSerializer}


class DispatchSerializer(serializers.Serializer):
    """A CRCR `client_payload`: {event_type, delivery_id, payload}."""

    event_type = serializers.ChoiceField(choices=sorted(PAYLOAD_SERIALIZERS))
    delivery_id = serializers.RegexField(
        r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,99}$",
        error_messages={"invalid": "must be a GUID-like id of at most 100 characters"},
    )
    payload = serializers.DictField()

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        payload = PAYLOAD_SERIALIZERS[attrs["event_type"]](data=attrs["payload"])
        if not payload.is_valid():
            raise serializers.ValidationError({"payload": payload.errors})
        # The payload is stored as sent; its columns are read from the typed fields
        # (a `ref` sent as 7 is the text "7", as the field accepted it).
        return attrs | {"fields": payload.validated_data}


class DispatchOutSerializer(serializers.Serializer):
    """A stored dispatch as the intake answers it. Fields declared, not a ModelSerializer:
    building a ModelSerializer's fields from the model took 0.8 ms of every dispatch's
    answer, 0.26 ms this way."""

    uuid = serializers.UUIDField(read_only=True)
    url = serializers.SerializerMethodField()
    delivery_id = serializers.CharField(read_only=True)
    event_type = serializers.CharField(read_only=True)
    action = serializers.CharField(read_only=True)
    pr_number = serializers.IntegerField(read_only=True, allow_null=True)
    base_ref = serializers.CharField(read_only=True)
    verdict = serializers.ChoiceField(choices=Dispatch.Verdict.choices, read_only=True)
    verdict_reason = serializers.CharField(read_only=True)
    received_at = serializers.DateTimeField(read_only=True)
    runs = serializers.SerializerMethodField()

    def get_url(self, dispatch: Dispatch) -> str:
        return f"/api/dispatches/{dispatch.uuid}/"

    def get_runs(self, dispatch: Dispatch) -> list[str]:
        if "runs" in self.context:
            return self.context["runs"]
        trigger = getattr(dispatch, "trigger", None)
        if trigger is None:
            return []
        # One per combination: later attempts are reached from their first (`attempts/`).
        return [str(run.uuid) for run in trigger.runs.filter(retry_of=None)]


class AttemptSerializer(serializers.Serializer):
    """The attempt of a run an upstream re-run asks for (GITHUB_RUN_ATTEMPT)."""

    run_attempt = serializers.IntegerField(min_value=2, max_value=1000)


class ReporterSerializer(serializers.Serializer):
    """The GitHub Actions run a reporter runs in: the HUD job identity it reports under."""

    run_id = serializers.RegexField(r"^[0-9]{1,20}$", help_text="GITHUB_RUN_ID")
    run_attempt = serializers.RegexField(r"^[0-9]{1,10}$", help_text="GITHUB_RUN_ATTEMPT")
    url = serializers.URLField(max_length=500, help_text="the Actions run's page")
    workflow = serializers.CharField(max_length=200, help_text="GITHUB_WORKFLOW")


class CallbackClaimSerializer(serializers.Serializer):
    reporter = ReporterSerializer()
    limit = serializers.IntegerField(min_value=1, max_value=50, default=10)


class ClaimedCallbackSerializer(serializers.ModelSerializer):
    """A claimed callback: what to send, and where to write the relay's answer back."""

    run = serializers.UUIDField(source="run.uuid", read_only=True)
    body = serializers.SerializerMethodField()
    answer_url = serializers.SerializerMethodField()

    class Meta:
        model = RelayCallback
        fields = ["uuid", "run", "job_name", "transition", "attempts", "body", "answer_url"]

    def get_body(self, callback: RelayCallback) -> dict[str, Any]:
        return callback.outgoing_body()

    def get_answer_url(self, callback: RelayCallback) -> str:
        return f"/api/relay/callbacks/{callback.uuid}/answer/"


class RelayTurnSerializer(serializers.Serializer):
    """A bridge asking for its next send's turn, with the relay's answer to its last send
    (a 429 or a Retry-After holds back the whole repository)."""

    status = serializers.IntegerField(
        min_value=100, max_value=599, allow_null=True, default=None, help_text="null: no answer"
    )
    retry_after = serializers.CharField(
        allow_null=True, default=None, max_length=200, help_text="the Retry-After header"
    )


class CallbackAnswerSerializer(RelayTurnSerializer):
    """The relay's answer to a claimed callback, as the reporter got it."""

    lease = serializers.CharField(max_length=200)
    sent = serializers.BooleanField(default=True, help_text="false: given back unsent")
    text = serializers.CharField(
        allow_blank=True, default="", max_length=20000, trim_whitespace=False
    )


class ReadinessWindowSerializer(serializers.Serializer):
    """A job's HUD jobs in one window against RFC 102; rates in percent, null with no job."""

    days = serializers.IntegerField()
    finished = serializers.IntegerField(help_text="finished HUD jobs of PyTorch pull requests")
    succeeded = serializers.IntegerField(help_text="of them, concluded success")
    timed_out = serializers.IntegerField(help_text="of them, concluded timed_out")
    pass_rate = serializers.FloatField(allow_null=True)
    pass_rate_margin = serializers.FloatField(
        allow_null=True, help_text="points above the threshold (negative: short of it)"
    )
    pass_rate_meets = serializers.BooleanField(allow_null=True)
    timeout_rate = serializers.FloatField(allow_null=True)
    timeout_rate_margin = serializers.FloatField(
        allow_null=True, help_text="points below the threshold (negative: over it)"
    )
    timeout_rate_meets = serializers.BooleanField(allow_null=True)
    ready = serializers.BooleanField(allow_null=True, help_text="both criteria met")


class ReadinessJobSerializer(serializers.Serializer):
    job_name = serializers.CharField(help_text="the HUD job; empty: all of the backend's jobs")
    windows = ReadinessWindowSerializer(many=True)


class ReadinessThresholdsSerializer(serializers.Serializer):
    pass_rate_above = serializers.FloatField()
    timeout_rate_below = serializers.FloatField()
    windows_days = serializers.ListField(child=serializers.IntegerField())


class ReadinessSerializer(serializers.Serializer):
    """A backend's L3 readiness (RFC 102) from crcr's own runs (`runs.readiness`)."""

    backend = serializers.CharField()
    thresholds = ReadinessThresholdsSerializer()
    overall = ReadinessJobSerializer()
    jobs = ReadinessJobSerializer(many=True)


class CallbackStateSerializer(serializers.ModelSerializer):
    class Meta:
        model = RelayCallback
        fields = ["uuid", "status", "attempts", "next_attempt_at", "last_status_code"]


def flatten_errors(errors: Any, prefix: str = "") -> list[str]:
    """DRF's nested error dict as readable lines: `payload.pull_request.number: …`."""
    if isinstance(errors, dict):
        lines = []
        for key, value in errors.items():
            name = prefix if key == "non_field_errors" else f"{prefix}.{key}".strip(".")
            lines += flatten_errors(value, name)
        return lines
    if isinstance(errors, list):
        if all(isinstance(item, str) for item in errors):
            return [f"{prefix}: {item}" if prefix else str(item) for item in errors]
        lines = []
        for index, item in enumerate(errors):
            lines += flatten_errors(item, f"{prefix}[{index}]")
        return lines
    return [f"{prefix}: {errors}"]
