"""crcr's URLs plus one view that fails, to see the 500 page a person gets."""

from django.urls import include, path


def boom(request):
    raise RuntimeError("a bug")


urlpatterns = [path("boom/", boom), path("", include("crcr_site.urls"))]
