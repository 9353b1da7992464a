"""GET /api/metrics/: Countersign's figures in Prometheus's text format, for staff and their tokens only.

Staff only: the figures name every agent and reason, and how fast people
answer. A scraper authenticates with a staff user's API token
(``Authorization: Token <key>``; in Prometheus's scrape config,
``authorization: {type: Token, credentials_file: ...}``).
"""

from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from prometheus_client.exposition import choose_encoder
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.permissions import IsAdminUser
from rest_framework.renderers import BaseRenderer
from rest_framework.views import APIView

from ..reads import metrics


class ExpositionRenderer(BaseRenderer):
    """Names the one form this door answers in; the body itself is written by prometheus_client."""

    media_type = "text/plain"
    format = "txt"


class AnyAccept(BaseContentNegotiation):
    # Prometheus's text format whatever the Accept header (choose_encoder picks OpenMetrics when it is
    # asked for): DRF's negotiation would answer a scraper's "text/plain;version=0.0.4" alone with 406.
    def select_renderer(self, request, renderers, format_suffix=None):
        return renderers[0], renderers[0].media_type


class Metrics(APIView):
    permission_classes = [IsAdminUser]
    renderer_classes = [ExpositionRenderer]
    content_negotiation_class = AnyAccept

    @extend_schema(
        summary="Prometheus metrics (staff only)",
        responses={(200, "text/plain"): OpenApiResponse(OpenApiTypes.STR, description="Prometheus text format.")},
    )
    def get(self, request):
        encode, content_type = choose_encoder(request.headers.get("Accept", ""))
        return HttpResponse(encode(metrics.registry()), content_type=content_type)
