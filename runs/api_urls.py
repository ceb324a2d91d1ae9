"""The machine API of runs, mounted under /api/ by crcr_site.api_urls."""

from django.urls import path

from runs import api

urlpatterns = [
    path("dispatches/", api.DispatchIntakeAPI.as_view(), name="dispatch_create"),
    path("dispatches/<uuid:uuid>/", api.DispatchDetailAPI.as_view(), name="dispatch_detail"),
    path("webhooks/github/<slug:slug>/", api.GitHubWebhookAPI.as_view(), name="webhook_github"),
    path("whoami/", api.WhoAmIAPI.as_view(), name="whoami"),
    path(
        "backends/<slug:slug>/readiness/",
        api.BackendReadinessAPI.as_view(),
        name="backend_readiness",
    ),
    path("runs/", api.RunListAPI.as_view(), name="run_list"),
    path("runs/<uuid:uuid>/", api.RunDetailAPI.as_view(), name="run_detail"),
    path("runs/<uuid:uuid>/attempts/", api.RunAttemptAPI.as_view(), name="run_attempt_create"),
    path("relay/turn/", api.RelayTurnAPI.as_view(), name="relay_turn"),
    path("relay/claim/", api.CallbackClaimAPI.as_view(), name="callback_claim"),
    path(
        "relay/callbacks/<uuid:uuid>/answer/",
        api.CallbackAnswerAPI.as_view(),
        name="callback_answer",
    ),
]
