"""GET /api/insight/?period=day|week|month: the insight page's figures, exactly as the page and its export read them.

Anyone logged in (session or token), like the page: every figure can be
read off the audit trail, which they read already.
"""

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.permissions import IsAuthenticated
from rest_framework.response import Response
from rest_framework.views import APIView

from ..hub.refusals import Refusal
from ..reads import insight


class Insight(APIView):
    permission_classes = [IsAuthenticated]

    @extend_schema(
        summary="The team's figures for the last day, week or month",
        parameters=[OpenApiParameter("period", str, enum=list(insight.PERIODS), default=insight.DEFAULT_PERIOD,
                                     description="How far back: the last day, week (the default) or 30 days.")],
        responses={200: OpenApiResponse(OpenApiTypes.OBJECT, description=(
            "Pending now by agent and reason; time to decision (count, p50_seconds, p95_seconds by nearest rank) "
            "overall and by agent, reason and reviewer; outcome counts and rates; breaches; refused answers."))},
    )
    def get(self, request):
        try:
            period = insight.period_of(request.query_params.get("period"))
        except insight.UnknownPeriod as unknown:
            raise Refusal("INVALID_PERIOD", str(unknown), status=400, period=unknown.given) from None
        return Response(insight.figures(period))
