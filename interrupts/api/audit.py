"""GET /api/audit/export/: the whole hash chain, as JSON that verifies offline or as CSV, with its head.

Anyone logged in, like the audit page. The JSON is the file
``python -m interrupts.verify_export`` checks (``protocol.trail``); the CSV
has a row per entry with the same fields and the head on every row.
"""

import csv
import itertools

from django.http import StreamingHttpResponse
from django.utils import timezone
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework.permissions import IsAuthenticated
from rest_framework.renderers import BaseRenderer
from rest_framework.views import APIView

from ..hub.trail import chain
from ..protocol import trail


class _Streamed(BaseRenderer):
    # Names a format DRF's negotiation may pick (?format=, Accept); the view streams the body itself.
    def render(self, data, accepted_media_type=None, renderer_context=None):  # pragma: no cover - never called
        raise NotImplementedError


class _JSON(_Streamed):
    media_type, format = "application/json", "json"


class _CSV(_Streamed):
    media_type, format = "text/csv", "csv"


class _Echo:
    def write(self, value):
        return value


class AuditExport(APIView):
    permission_classes = [IsAuthenticated]
    renderer_classes = [_JSON, _CSV]

    @extend_schema(
        summary="The whole audit hash chain, to verify offline",
        parameters=[OpenApiParameter("format", str, enum=["json", "csv"], default="json")],
        responses={200: OpenApiResponse(OpenApiTypes.OBJECT, description=(
            "JSON: {entries: [{seq, kind, subject, prevHash, hash, content}], format, head: {seq, hash}}, RFC 8785 "
            "canonical; check it with `python -m interrupts.verify_export FILE`. CSV: seq, kind, subject, "
            "prev_hash, hash, content, audit_head."))},
    )
    def get(self, request):
        head = chain.head()
        kind = request.accepted_renderer.format
        if kind == "csv":
            writer = csv.writer(_Echo())
            header = [writer.writerow(["seq", "kind", "subject", "prev_hash", "hash", "content", "audit_head"])]
            # Content is the hashed JSON text as it is: it starts with "{", never a spreadsheet formula.
            rows = (writer.writerow([e["seq"], e["kind"], e["subject"], e["prevHash"], e["hash"], e["content"],
                                     str(head)]) for e in chain.export(head))
            response = StreamingHttpResponse(itertools.chain(header, rows), content_type="text/csv")
        else:
            response = StreamingHttpResponse(trail.export_chunks(head.as_dict(), chain.export(head)),
                                             content_type="application/json")
        stamp = timezone.now().strftime("%Y%m%d-%H%M%S")
        response["Content-Disposition"] = f'attachment; filename="countersign-audit-{stamp}.{kind}"'
        response[trail.HEAD_HEADER] = str(head)
        return response
