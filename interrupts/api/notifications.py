"""The REST API's webhooks and deliveries, for staff: register webhooks, see each delivery, send one again.

Thin, as the rest of the API: shapes are checked here, ``hub.notify`` owns
every change a delivery goes through.
"""

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, serializers, status, viewsets
from rest_framework.permissions import IsAdminUser, IsAuthenticated
from rest_framework.response import Response

from ..hub.notify import email as notify_email
from ..hub.notify import webhooks as notify_webhooks
from ..hub.refusals import Refusal
from ..models import Delivery, DeliveryAttempt, NotificationPreference, NotifyEvent, Webhook


class WebhookSerializer(serializers.ModelSerializer):
    events = serializers.ListField(child=serializers.ChoiceField(choices=NotifyEvent.choices), min_length=1,
                                   required=False, help_text="Which events it is sent; all of them by default.")
    group = serializers.SlugRelatedField(slug_field="name", required=False, allow_null=True,
                                         queryset=Webhook._meta.get_field("group").related_model.objects.all())
    policy = serializers.SlugRelatedField(slug_field="name", required=False, allow_null=True,
                                          queryset=Webhook._meta.get_field("policy").related_model.objects.all())

    class Meta:
        model = Webhook
        fields = ["id", "name", "url", "group", "policy", "events", "active", "created_at"]
        read_only_fields = ["id", "created_at"]

    def validate_events(self, value):
        if len(set(value)) != len(value):
            raise serializers.ValidationError("Name each event once.")
        return value


class WebhookCreatedSerializer(WebhookSerializer):
    """A webhook as registered: the only answer that carries its signing secret."""

    class Meta(WebhookSerializer.Meta):
        fields = [*WebhookSerializer.Meta.fields, "secret"]
        read_only_fields = [*WebhookSerializer.Meta.read_only_fields, "secret"]


class AttemptSerializer(serializers.ModelSerializer):
    resent_by = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = DeliveryAttempt
        fields = ["number", "at", "response_status", "response_excerpt", "error", "resent_by"]


class DeliverySerializer(serializers.ModelSerializer):
    webhook = serializers.SlugRelatedField(slug_field="name", read_only=True)
    tries = AttemptSerializer(many=True, read_only=True)

    class Meta:
        model = Delivery
        fields = ["id", "webhook", "event", "key", "status", "attempts", "next_attempt_at", "response_status",
                  "response_excerpt", "last_error", "created_at", "delivered_at", "body", "tries"]


class WebhookViewSet(viewsets.ModelViewSet):
    """Where events are POSTed, signed: staff only (a webhook sees every request it is scoped to)."""

    queryset = Webhook.objects.select_related("group", "policy")
    serializer_class = WebhookSerializer
    permission_classes = [IsAuthenticated, IsAdminUser]

    @extend_schema(responses={201: WebhookCreatedSerializer})
    def create(self, request, *args, **kwargs):
        """Register a webhook; the answer carries its signing secret, shown this once."""
        body = WebhookSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        hook = body.save()
        return Response(WebhookCreatedSerializer(hook).data, status=status.HTTP_201_CREATED)


@extend_schema(parameters=[
    OpenApiParameter("webhook", str, description="Only this webhook's deliveries (its name)."),
    OpenApiParameter("status", str, enum=list(Delivery.Status.values), description="Only deliveries in this state."),
])
class DeliveryList(generics.ListAPIView):
    """Every delivery, newest first: its status, tries and what the receiver answered."""

    serializer_class = DeliverySerializer
    permission_classes = [IsAuthenticated, IsAdminUser]

    def get_queryset(self):
        rows = Delivery.objects.select_related("webhook").prefetch_related("tries__resent_by")
        params = self.request.query_params
        if params.get("webhook"):
            rows = rows.filter(webhook__name=params["webhook"])
        if params.get("status"):
            if params["status"] not in Delivery.Status.values:
                raise Refusal("INVALID_REQUEST", f"status is one of {', '.join(Delivery.Status.values)}.",
                              status=400)
            rows = rows.filter(status=params["status"])
        return rows


class DeliveryDetail(generics.RetrieveAPIView):
    serializer_class = DeliverySerializer
    permission_classes = [IsAuthenticated, IsAdminUser]
    queryset = Delivery.objects.select_related("webhook").prefetch_related("tries__resent_by")


class ResendDelivery(generics.GenericAPIView):
    """Queue a delivery's very body again, due now, with a fresh set of tries."""

    serializer_class = DeliverySerializer
    permission_classes = [IsAuthenticated, IsAdminUser]
    queryset = Delivery.objects.all()

    @extend_schema(request=None, responses={202: DeliverySerializer})
    def post(self, request, pk):
        delivery = self.get_object()
        if not notify_webhooks.resend(delivery, request.user):
            raise Refusal("BEING_SENT", f"Delivery {delivery.pk} is being sent right now: look again in a moment.",
                          status=409)
        return Response(DeliverySerializer(DeliveryDetail.queryset.get(pk=delivery.pk)).data,
                        status=status.HTTP_202_ACCEPTED)


class PreferenceSerializer(serializers.Serializer):
    email = serializers.ChoiceField(choices=NotificationPreference.Email.choices)


class MyNotifications(generics.GenericAPIView):
    """How you hear of requests by email: immediate, digest or none (any logged-in user, their own)."""

    serializer_class = PreferenceSerializer

    @extend_schema(responses={200: PreferenceSerializer})
    def get(self, request):
        return Response({"email": notify_email.email_choice(request.user)})

    @extend_schema(request=PreferenceSerializer, responses={200: PreferenceSerializer})
    def put(self, request):
        body = PreferenceSerializer(data=request.data)
        body.is_valid(raise_exception=True)
        notify_email.choose_email(request.user, body.validated_data["email"])
        return Response({"email": body.validated_data["email"]})
