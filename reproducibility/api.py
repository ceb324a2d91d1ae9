"""Machine API of reproducibility: metadata, bundles, attestations, re-runs, bisections.

Token-authenticated; reads need a signed-in user, starting work the reviewer
role, and both a token that acts for the run's backend (403 otherwise, nothing
started). Work that starts later answers 202 with the resource's URL.
"""

from typing import Any

from django.http import FileResponse
from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.permissions import BasePermission, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from crcr_site.lib.access import IsReviewer, RoleTokenAuthentication, check_backend
from reproducibility import access, attestation, bisect, bundles, rerun
from reproducibility import metadata as run_metadata
from reproducibility.models import Bisection, Rerun
from reproducibility.serializers import (
    BisectionSerializer,
    BundleRequestSerializer,
    BundleSerializer,
    RerunSerializer,
)
from reproducibility.views import serve
from runs.models import Run


class TokenAPIView(APIView):
    authentication_classes = [RoleTokenAuthentication]
    permission_classes = [IsAuthenticated]

    def get_permissions(self) -> list[BasePermission]:
        # Reading is for every signed-in client; starting work is for reviewers.
        if self.request.method == "POST":
            return [IsAuthenticated(), IsReviewer()]
        return [IsAuthenticated()]


def _run(request: Request, uuid: str) -> Run:
    """The run (404), if the token acts for its backend (403)."""
    run = access.run_for(uuid)
    check_backend(request, run.backend)
    return run


def _accepted(data: dict[str, Any]) -> Response:
    return Response(data, status=status.HTTP_202_ACCEPTED, headers={"Location": data["url"]})


def _refused(error: Exception) -> Response:
    return Response({"error": str(error)}, status=status.HTTP_400_BAD_REQUEST)


class RecordAPI(TokenAPIView):
    """Everything recorded about a run (the bundle's metadata.json)."""

    @extend_schema(responses={200: OpenApiTypes.OBJECT}, operation_id="run_record_retrieve")
    def get(self, request: Request, uuid: str) -> Response:
        return Response(run_metadata.metadata(_run(request, uuid)))


class AttestationAPI(TokenAPIView):
    """The run's in-toto test-result statement (unsigned)."""

    @extend_schema(responses={200: OpenApiTypes.OBJECT}, operation_id="run_attestation_retrieve")
    def get(self, request: Request, uuid: str) -> Response:
        return Response(attestation.statement(run_metadata.metadata(_run(request, uuid))))


class BundleListAPI(TokenAPIView):
    @extend_schema(responses={200: BundleSerializer(many=True)}, operation_id="run_bundle_list")
    def get(self, request: Request, uuid: str) -> Response:
        run = _run(request, uuid)
        rows = run.bundles.select_related("run").order_by("-created_at", "-pk")
        return Response(BundleSerializer(rows, many=True, context={"request": request}).data)

    @extend_schema(
        request=BundleRequestSerializer,
        responses={202: BundleSerializer, 400: OpenApiTypes.OBJECT},
        operation_id="run_bundle_create",
    )
    def post(self, request: Request, uuid: str) -> Response:
        run = _run(request, uuid)
        form = BundleRequestSerializer(data=request.data)
        form.is_valid(raise_exception=True)
        if not run.is_finished:
            return _refused(ValueError("a bundle is built once the run has finished"))
        bundle = bundles.request(
            run, form.validated_data["include_artifacts"], request.user,
            request.build_absolute_uri("/"),
        )  # fmt: skip
        return _accepted(BundleSerializer(bundle, context={"request": request}).data)


class BundleDetailAPI(TokenAPIView):
    @extend_schema(responses={200: BundleSerializer}, operation_id="run_bundle_retrieve")
    def get(self, request: Request, uuid: str, bundle_uuid: str) -> Response:
        bundle = access.bundle_for(_run(request, uuid), bundle_uuid)
        return Response(BundleSerializer(bundle, context={"request": request}).data)


class BundleDownloadAPI(TokenAPIView):
    @extend_schema(
        responses={(200, "application/gzip"): OpenApiTypes.BINARY},
        operation_id="run_bundle_download",
    )
    def get(self, request: Request, uuid: str, bundle_uuid: str) -> FileResponse:
        return serve(access.downloadable(_run(request, uuid), bundle_uuid))


class RerunCreateAPI(TokenAPIView):
    @extend_schema(
        request=None,
        responses={202: RerunSerializer, 400: OpenApiTypes.OBJECT},
        operation_id="run_bundle_rerun_create",
    )
    def post(self, request: Request, uuid: str, bundle_uuid: str) -> Response:
        bundle = access.bundle_for(_run(request, uuid), bundle_uuid)
        try:
            made = rerun.start(bundle, user=request.user)
        except rerun.RerunError as error:
            return _refused(error)
        return _accepted(RerunSerializer(made, context={"request": request}).data)


class RerunDetailAPI(TokenAPIView):
    @extend_schema(responses={200: RerunSerializer}, operation_id="rerun_retrieve")
    def get(self, request: Request, uuid: str) -> Response:
        made = get_object_or_404(
            Rerun.objects.select_related("original__backend", "run"), uuid=uuid
        )
        check_backend(request, made.original.backend)
        return Response(RerunSerializer(made, context={"request": request}).data)


class BisectionCreateAPI(TokenAPIView):
    @extend_schema(
        request=None,
        responses={202: BisectionSerializer, 400: OpenApiTypes.OBJECT},
        operation_id="run_bisection_create",
    )
    def post(self, request: Request, uuid: str) -> Response:
        try:
            bisection = bisect.start(_run(request, uuid), user=request.user)
        except bisect.BisectError as error:
            return _refused(error)
        return _accepted(BisectionSerializer(bisection, context={"request": request}).data)


class BisectionDetailAPI(TokenAPIView):
    @extend_schema(responses={200: BisectionSerializer}, operation_id="bisection_retrieve")
    def get(self, request: Request, uuid: str) -> Response:
        bisection = get_object_or_404(
            Bisection.objects.select_related("bad_run__backend"), uuid=uuid
        )
        check_backend(request, bisection.bad_run.backend)
        return Response(BisectionSerializer(bisection, context={"request": request}).data)
