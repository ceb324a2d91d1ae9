"""Machine API of the runs app (token-authenticated)."""

from rest_framework import generics
from rest_framework.authentication import TokenAuthentication
from rest_framework.permissions import IsAuthenticated

from runs.models import Run
from runs.serializers import RunSerializer


class RunListAPI(generics.ListAPIView):
    authentication_classes = [TokenAuthentication]
    permission_classes = [IsAuthenticated]
    serializer_class = RunSerializer
    queryset = Run.objects.select_related("backend").order_by("-created_at")


class RunDetailAPI(generics.RetrieveAPIView):
    authentication_classes = [TokenAuthentication]
    permission_classes = [IsAuthenticated]
    serializer_class = RunSerializer
    queryset = Run.objects.select_related("backend")
    lookup_field = "uuid"
