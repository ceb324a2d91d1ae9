from django.urls import path

from runs import api

app_name = "api"
urlpatterns = [
    path("runs/", api.RunListAPI.as_view(), name="run_list"),
    path("runs/<uuid:uuid>/", api.RunDetailAPI.as_view(), name="run_detail"),
]
