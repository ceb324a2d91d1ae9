"""DRF serializers of reproducibility: what machines send and receive."""

from collections.abc import Mapping
from typing import Any

from django.urls import reverse
from rest_framework import serializers

from reproducibility.models import Bisection, Bundle, Rerun


def _absolute(context: Mapping[str, Any], path: str) -> str:
    request = context.get("request")
    return request.build_absolute_uri(path) if request else path


class BundleSerializer(serializers.ModelSerializer):
    run = serializers.UUIDField(source="run.uuid", read_only=True)
    url = serializers.SerializerMethodField()
    download_url = serializers.SerializerMethodField()
    files = serializers.SerializerMethodField()

    class Meta:
        model = Bundle
        fields = ["uuid", "run", "status", "include_artifacts", "sha256", "size", "files",
                  "error", "created_at", "built_at", "expires_at", "url", "download_url"]  # fmt: skip

    def get_url(self, bundle: Bundle) -> str:
        path = reverse("api:bundle_detail", args=[bundle.run.uuid, bundle.uuid])
        return _absolute(self.context, path)

    def get_download_url(self, bundle: Bundle) -> str | None:
        if bundle.status != Bundle.Status.READY:
            return None
        path = reverse("api:bundle_download", args=[bundle.run.uuid, bundle.uuid])
        return _absolute(self.context, path)

    def get_files(self, bundle: Bundle) -> int:
        return len(bundle.manifest.get("files", []))


class BundleRequestSerializer(serializers.Serializer):
    include_artifacts = serializers.BooleanField(default=False)


class RerunSerializer(serializers.ModelSerializer):
    original = serializers.UUIDField(source="original.uuid", read_only=True)
    run = serializers.UUIDField(source="run.uuid", read_only=True)
    run_status = serializers.CharField(source="run.status", read_only=True)
    run_error = serializers.CharField(source="run.error", read_only=True)
    bundle = serializers.UUIDField(source="bundle.uuid", read_only=True, allow_null=True)
    url = serializers.SerializerMethodField()
    comparison = serializers.SerializerMethodField()

    class Meta:
        model = Rerun
        fields = ["uuid", "original", "run", "run_status", "run_error", "bundle", "created_at",
                  "url", "comparison"]  # fmt: skip

    def get_url(self, made: Rerun) -> str:
        return _absolute(self.context, reverse("api:rerun_detail", args=[made.uuid]))

    def get_comparison(self, made: Rerun) -> list[dict[str, Any]]:
        from reproducibility.rerun import comparison

        return [
            {"node_id": row.node_id, "before": row.before, "before_category": row.before_category,
             "after": row.after, "after_category": row.after_category, "same": row.same}
            for row in comparison(made.original, made.run)
        ]  # fmt: skip


class BisectionSerializer(serializers.ModelSerializer):
    good_run = serializers.UUIDField(source="good_run.uuid", read_only=True)
    bad_run = serializers.UUIDField(source="bad_run.uuid", read_only=True)
    url = serializers.SerializerMethodField()

    class Meta:
        model = Bisection
        fields = ["uuid", "status", "good_run", "bad_run", "test_ids", "commits", "steps",
                  "first_bad_sha", "message", "created_at", "started_at", "finished_at", "url"]  # fmt: skip

    def get_url(self, bisection: Bisection) -> str:
        path = reverse("api:bisection_detail", args=[bisection.uuid])
        return _absolute(self.context, path)
