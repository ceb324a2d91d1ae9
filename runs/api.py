"""Machine API of the runs app: dispatch intake, GitHub webhooks, runs, HUD reporters.

Every endpoint that touches a backend's rows checks that the token acts for that backend
(`check_backend`: 403, nothing written) before it changes or shows anything."""

from typing import Any

from django.shortcuts import get_object_or_404
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import generics, status
from rest_framework import serializers as fields
from rest_framework.exceptions import NotAuthenticated
from rest_framework.permissions import AllowAny, IsAuthenticated
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from crcr_site.lib.access import IsMachine, RoleTokenAuthentication, check_backend
from runs import attempts, readiness
from runs import dispatch as intake
from runs.models import ApiToken, Backend, Dispatch, RelayCallback, Run
from runs.relay import claims, delivery, pacing
from runs.serializers import (
    AttemptSerializer,
    CallbackAnswerSerializer,
    CallbackClaimSerializer,
    CallbackStateSerializer,
    ClaimedCallbackSerializer,
    DispatchOutSerializer,
    DispatchSerializer,
    ReadinessSerializer,
    RelayTurnSerializer,
    RunDetailSerializer,
    RunSerializer,
)

# A refused request: the first problem, and all of them.
PROBLEMS = inline_serializer(
    "Problems",
    {"error": fields.CharField(), "problems": fields.ListField(child=fields.CharField())},
)


class TokenAPIView(APIView):
    authentication_classes = [RoleTokenAuthentication]
    permission_classes = [IsAuthenticated]


def _token(request: Request) -> ApiToken:
    """The request's API token (these views authenticate only with one)."""
    token = request.auth
    if not isinstance(token, ApiToken):
        raise NotAuthenticated()
    return token


def _answer(received: intake.Received) -> Response:
    """202 with the dispatch's URL for new work; 200 with the record for a redelivery, and
    for a dispatch the backend refused (its verdict `rejected` and the reason): nothing
    was queued. Not a 4xx: the forwarding workflow would fail on one for every pull
    request, and the bridge already ends quietly on a rejected verdict."""
    # A new dispatch has no runs yet: the gate has not seen it.
    context: dict[str, list[str]] = {"runs": []} if received.created else {}
    body = DispatchOutSerializer(received.dispatch, context=context).data
    queued = received.created and received.dispatch.verdict == Dispatch.Verdict.PENDING
    code = status.HTTP_202_ACCEPTED if queued else status.HTTP_200_OK
    return Response(body, status=code, headers={"Location": body["url"]})


def _refuse(error: intake.IntakeError) -> Response:
    return Response({"error": error.problems[0], "problems": error.problems}, status=error.status)


def _backend_for(request: Request) -> Backend:
    """The backend a machine call names (or the only one); its token must act for it."""
    backend = _named_backend(request)
    check_backend(request, backend)
    return backend


def _named_backend(request: Request) -> Backend:
    slug = request.query_params.get("backend") or request.headers.get("X-CRCR-Backend")
    if slug:
        try:
            return Backend.objects.get(slug=slug)
        except Backend.DoesNotExist:
            raise intake.IntakeError(404, [f"no backend named {slug!r}"]) from None
    backends = list(Backend.objects.all()[:2])
    if len(backends) != 1:
        raise intake.IntakeError(
            400, ["name the backend with ?backend=<slug> or the X-CRCR-Backend header"]
        )
    return backends[0]


class DispatchIntakeAPI(TokenAPIView):
    """POST a CRCR client_payload ({event_type, delivery_id, payload}) as forwarded."""

    # A dispatch starts runs that report to the HUD: machine tokens only.
    permission_classes = [IsAuthenticated, IsMachine]

    @extend_schema(
        request=DispatchSerializer,
        responses={202: DispatchOutSerializer, 200: DispatchOutSerializer, 400: PROBLEMS},
        operation_id="dispatch_create",
    )
    def post(self, request: Request) -> Response:
        try:
            intake.check_size(request.META.get("CONTENT_LENGTH"))
            backend = _backend_for(request)
            raw = request.body
            received = intake.receive(backend, intake.parse_json(raw), raw, Dispatch.Source.CRCR)
        except intake.IntakeError as error:
            return _refuse(error)
        return _answer(received)


class DispatchDetailAPI(TokenAPIView):
    @extend_schema(responses=DispatchOutSerializer, operation_id="dispatch_retrieve")
    def get(self, request: Request, uuid: str) -> Response:
        dispatch = get_object_or_404(Dispatch.objects.select_related("backend"), uuid=uuid)
        check_backend(request, dispatch.backend)
        return Response(DispatchOutSerializer(dispatch).data)


class GitHubWebhookAPI(APIView):
    """A GitHub webhook sent straight to crcr, verified by X-Hub-Signature-256."""

    authentication_classes: list[Any] = []
    permission_classes = [AllowAny]

    @extend_schema(
        request=OpenApiTypes.OBJECT,
        responses={
            202: DispatchOutSerializer,
            200: DispatchOutSerializer,
            400: PROBLEMS,
            401: PROBLEMS,
        },
        operation_id="webhook_github",
        description="A GitHub webhook (X-GitHub-Event, X-GitHub-Delivery), verified by "
        "X-Hub-Signature-256 with the backend's secret; `ping` answers pong.",
    )
    def post(self, request: Request, slug: str) -> Response:
        try:
            intake.check_size(request.META.get("CONTENT_LENGTH"))
            raw = request.body
            # An unknown backend is answered as a bad signature is (no 404: no slug listing).
            backend = intake.verify_signature(
                Backend.objects.filter(slug=slug).first(),
                raw,
                request.headers.get("X-Hub-Signature-256"),
            )
            event = request.headers.get("X-GitHub-Event")
            if event == "ping":
                return Response({"ok": True, "status": "pong"})
            body = intake.webhook_body(
                event, request.headers.get("X-GitHub-Delivery"), intake.parse_json(raw)
            )
            received = intake.receive(backend, body, raw, Dispatch.Source.WEBHOOK)
        except intake.IntakeError as error:
            return _refuse(error)
        return _answer(received)


class WhoAmIAPI(TokenAPIView):
    """The token's user and the backends it acts for: for clients to check a token."""

    @extend_schema(
        responses=inline_serializer(
            "WhoAmI",
            {
                "username": fields.CharField(),
                "backends": fields.ListField(child=fields.CharField()),
            },
        ),
        operation_id="whoami",
    )
    def get(self, request: Request) -> Response:
        backends = [backend.slug for backend in _token(request).scope().order_by("slug")]
        return Response({"username": request.user.get_username(), "backends": backends})


class RunListAPI(generics.ListAPIView):
    authentication_classes = [RoleTokenAuthentication]
    permission_classes = [IsAuthenticated]
    serializer_class = RunSerializer

    def get_queryset(self) -> Any:
        # The runs of the backends the token acts for.
        runs = Run.objects.filter(backend__in=_token(self.request).scope())
        return runs.select_related("backend").order_by("-created_at")


class RunDetailAPI(generics.RetrieveAPIView):
    authentication_classes = [RoleTokenAuthentication]
    permission_classes = [IsAuthenticated]
    serializer_class = RunDetailSerializer
    queryset = Run.objects.select_related("backend", "trigger__dispatch", "retry_of")
    lookup_field = "uuid"

    def get_object(self) -> Run:
        run: Run = super().get_object()
        check_backend(self.request, run.backend)
        return run


class BackendReadinessAPI(TokenAPIView):
    """GET: the backend's L3 readiness (RFC 102) over 7 days and 4 weeks, per HUD job."""

    @extend_schema(responses={200: ReadinessSerializer}, operation_id="backend_readiness")
    def get(self, request: Request, slug: str) -> Response:
        backend = get_object_or_404(Backend, slug=slug)
        check_backend(request, backend)
        return Response(ReadinessSerializer(readiness.of_backend(backend.slug)).data)


class RunAttemptAPI(TokenAPIView):
    """POST {"run_attempt": N}: the run to follow as the run's attempt N. 201: a new attempt
    re-runs what failed; 200: made before, or the previous attempt (still going, or passed)."""

    # An attempt starts work that reports to the HUD: machine tokens only.
    permission_classes = [IsAuthenticated, IsMachine]

    @extend_schema(
        request=AttemptSerializer,
        responses={200: RunSerializer, 201: RunSerializer},
        operation_id="run_attempt_create",
    )
    def post(self, request: Request, uuid: str) -> Response:
        run = get_object_or_404(Run.objects.select_related("backend"), uuid=uuid)
        check_backend(request, run.backend)
        serializer = AttemptSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        made = attempts.start(run, serializer.validated_data["run_attempt"])
        code = status.HTTP_201_CREATED if made.created else status.HTTP_200_OK
        return Response(RunSerializer(made.run).data, status=code)


class IsReporter(IsMachine):
    message = "Reporting to the HUD needs the machine role (manage.py create_user --role machine)."


class CallbackClaimAPI(TokenAPIView):
    """POST: a GitHub Actions reporter claims the backend's due HUD callbacks on a lease."""

    # What a reporter sends reaches the HUD under the backend's name: machine tokens only.
    permission_classes = [IsAuthenticated, IsReporter]

    @extend_schema(
        request=CallbackClaimSerializer,
        responses={200: OpenApiTypes.OBJECT, 403: OpenApiTypes.OBJECT, 409: OpenApiTypes.OBJECT},
        operation_id="callback_claim",
    )
    def post(self, request: Request) -> Response:
        try:
            backend = _backend_for(request)
        except intake.IntakeError as error:
            return _refuse(error)
        if backend.relay_sender != Backend.RelaySender.ACTIONS:
            problem = (
                f"backend {backend.slug!r} sends its HUD callbacks from crcr's relay worker "
                "(relay_sender worker): set it to actions for a GitHub Actions reporter"
            )
            return Response({"error": problem}, status=status.HTTP_409_CONFLICT)
        serializer = CallbackClaimSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        reporter = claims.Reporter(**data["reporter"])
        claim = claims.claim(backend, reporter, data["limit"], holder=_token(request))
        return Response(
            {
                "lease": {
                    "id": claim.lease,
                    "until": claim.lease_until,
                    "seconds": claims.lease_seconds(),
                },
                "callbacks": ClaimedCallbackSerializer(claim.callbacks, many=True).data,
                "next_turn_in": claim.next_turn_in,
            }
        )


class RelayTurnAPI(TokenAPIView):
    """POST: a bridge's next send takes a turn in its repository's callback budget, shared
    with crcr's relay worker and the reporters: `wait` 0 means send now (it is counted),
    else ask again in `wait` seconds. The relay's answer to its last send comes along."""

    permission_classes = [IsAuthenticated, IsReporter]

    @extend_schema(
        request=RelayTurnSerializer,
        responses={200: OpenApiTypes.OBJECT, 403: OpenApiTypes.OBJECT},
        operation_id="relay_turn",
    )
    def post(self, request: Request) -> Response:
        try:
            backend = _backend_for(request)
        except intake.IntakeError as error:
            return _refuse(error)
        serializer = RelayTurnSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        if data["status"] is not None:
            answer = delivery.answer_of(data["status"], "", data["retry_after"])
            pacing.hold_back(backend.repository, answer)
        return Response({"wait": round(pacing.turn(backend.repository).wait, 3)})


class CallbackAnswerAPI(TokenAPIView):
    """POST the relay's answer to a claimed callback; the outbox settles it. Only the token
    whose claim holds the lease answers (403 for any other: it cannot mark a job sent)."""

    permission_classes = [IsAuthenticated, IsReporter]

    @extend_schema(
        request=CallbackAnswerSerializer,
        responses={
            200: CallbackStateSerializer,
            403: OpenApiTypes.OBJECT,
            409: OpenApiTypes.OBJECT,
        },
        operation_id="callback_answer",
    )
    def post(self, request: Request, uuid: str) -> Response:
        found = get_object_or_404(RelayCallback.objects.select_related("run__backend"), uuid=uuid)
        check_backend(request, found.run.backend)
        serializer = CallbackAnswerSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        answer = None
        if data["sent"]:
            answer = delivery.answer_of(data["status"], data["text"], data["retry_after"])
        callback = claims.settle_reported(str(uuid), data["lease"], answer, holder=_token(request))
        if callback is None:
            if found.claimed_by == data["lease"] and found.lease_holder_id != _token(request).pk:
                # Only the token whose claim holds the lease may answer for it.
                problem = "this callback's lease is held by another token: it answers it"
                return Response({"error": problem}, status=status.HTTP_403_FORBIDDEN)
            problem = (
                "this lease is no longer held (it ran out and the callback was taken back); "
                "its next try settles it"
            )
            return Response({"error": problem, "lease_lost": True}, status=status.HTTP_409_CONFLICT)
        return Response(CallbackStateSerializer(callback).data)
