from django.urls import path

from selection import pipeline_views

app_name = "pipeline"
urlpatterns = [
    path(
        "selection-runs/<uuid:uuid>/",
        pipeline_views.selectionrun_detail,
        name="selectionrun_detail",
    ),
    path("operators/enable/", pipeline_views.operator_enable, name="operator_enable"),
]
