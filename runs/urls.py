from django.urls import path

from runs import views

app_name = "runs"
urlpatterns = [
    path("", views.hud, name="hud"),
    path("summary/", views.summary, name="summary"),
    path("metrics/", views.metrics_page, name="metrics"),
    path("runs/", views.run_list, name="run_list"),
    path("runs/new/", views.trigger_create, name="trigger_create"),
    path("runs/<uuid:uuid>/", views.run_detail, name="run_detail"),
    path("dispatches/", views.dispatch_list, name="dispatch_list"),
    path("dispatches/<uuid:uuid>/", views.dispatch_detail, name="dispatch_detail"),
    path("dispatches/<uuid:uuid>/payload.json", views.dispatch_payload, name="dispatch_payload"),
]
