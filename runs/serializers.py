from rest_framework import serializers

from runs.models import Run


class RunSerializer(serializers.ModelSerializer):
    backend = serializers.CharField(source="backend.slug", read_only=True)

    class Meta:
        model = Run
        fields = [
            "uuid",
            "backend",
            "job_name",
            "pytorch_sha",
            "backend_version",
            "status",
            "created_at",
            "started_at",
            "finished_at",
        ]
