"""The notification pages and API: staff register webhooks and re-send deliveries; each person picks their email."""

import pytest
from django.utils import timezone

from interrupts.models import Delivery, DeliveryAttempt, NotificationPreference, Webhook

from .. import factories as make

pytestmark = pytest.mark.django_db


def a_delivery(status="failed") -> Delivery:
    hook = Webhook.objects.create(name="ops", url="http://127.0.0.1:9/hook")
    interrupt = make.interrupt()
    return Delivery.objects.create(webhook=hook, event="raised", key=f"raised:interrupt:{interrupt.pk}",
                                   interrupt=interrupt, body='{"id":"x"}', status=status, attempts=3,
                                   next_attempt_at=timezone.now(), response_status=500,
                                   response_excerpt="<b>down</b>", last_error="HTTP 500")


def test_staff_add_a_webhook_and_see_its_secret_once(client, staff):
    response = client.post("/webhooks/", {"name": "ops", "url": "https://hooks.example.com/cs",
                                          "events": ["raised", "escalated"], "active": "on"})
    hook = Webhook.objects.get()
    assert (hook.events, response["Cache-Control"]) == (["raised", "escalated"], "no-store")
    assert hook.secret in response.content.decode()
    listing = client.get("/webhooks/").content.decode()
    assert "https://hooks.example.com/cs" in listing and hook.secret not in listing


def test_a_webhook_needs_an_http_url_and_known_events(client, staff):
    response = client.post("/webhooks/", {"name": "bad", "url": "ftp://example.com/", "events": ["sunrise"]})
    assert response.status_code == 200 and not Webhook.objects.exists()
    assert "Give an http:// or https:// URL." in response.content.decode()


def test_the_deliveries_page_shows_each_try_and_resends_through_a_csrf_checked_post(client, staff):
    delivery = a_delivery()
    page = client.get("/webhooks/deliveries/?webhook=ops").content.decode()
    assert "HTTP 500" in page and "&lt;b&gt;down&lt;/b&gt;" in page and "<b>down</b>" not in page
    response = client.post(f"/webhooks/deliveries/{delivery.pk}/resend/")
    assert response.status_code == 302
    delivery.refresh_from_db()
    assert (delivery.status, delivery.resent_by, delivery.resent_from) == ("queued", staff, 3)
    from django.test import Client
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(staff)
    assert strict.post(f"/webhooks/deliveries/{delivery.pk}/resend/").status_code == 403


def test_anyone_logged_in_picks_immediate_digest_or_none(client):
    user = make.user(reviewer=False, email="me@example.com")
    client.force_login(user)
    assert "me@example.com" in client.get("/settings/notifications/").content.decode()
    assert client.post("/settings/notifications/", {"email": "digest"}).status_code == 302
    assert NotificationPreference.objects.get(user=user).email == "digest"
    assert client.post("/settings/notifications/", {"email": "loud"}).status_code == 200
    assert NotificationPreference.objects.get(user=user).email == "digest"


def test_the_api_registers_webhooks_lists_deliveries_and_resends(client, staff):
    created = client.post("/api/webhooks/", {"name": "api-hook", "url": "http://127.0.0.1:9/h",
                                             "events": ["decided"]}, content_type="application/json")
    assert created.status_code == 201 and created.json()["secret"].startswith("css_")
    assert "secret" not in client.get("/api/webhooks/").json()["results"][0]
    bad = client.post("/api/webhooks/", {"name": "x", "url": "http://127.0.0.1:9/h", "events": ["sunrise"]},
                      content_type="application/json")
    assert bad.status_code == 400 and bad.json()["code"] == "INVALID_REQUEST"
    delivery = a_delivery()
    DeliveryAttempt.objects.create(delivery=delivery, number=1, at=timezone.now(), response_status=500)
    [row] = client.get("/api/deliveries/", {"webhook": "ops"}).json()["results"]
    assert (row["status"], row["attempts"], row["tries"][0]["response_status"]) == ("failed", 3, 500)
    assert client.get("/api/deliveries/", {"status": "lost"}).status_code == 400
    resent = client.post(f"/api/deliveries/{delivery.pk}/resend/")
    assert resent.status_code == 202 and resent.json()["status"] == "queued"
    Delivery.objects.filter(pk=delivery.pk).update(status="sending")
    busy = client.post(f"/api/deliveries/{delivery.pk}/resend/")
    assert busy.status_code == 409 and busy.json()["code"] == "BEING_SENT"


def test_deliveries_are_staff_only_and_preferences_are_each_ones_own(client):
    user = make.user()
    client.force_login(user)
    assert client.get("/api/deliveries/").status_code == 403
    assert client.get("/api/me/notifications/").json() == {"email": "immediate"}
    assert client.put("/api/me/notifications/", {"email": "none"}, content_type="application/json").json() \
        == {"email": "none"}
    bad = client.put("/api/me/notifications/", {"email": "loud"}, content_type="application/json")
    assert bad.status_code == 400


def test_without_an_email_address_no_email_is_what_shows_and_the_others_cannot_be_picked(client):
    user = make.user(reviewer=False, email="")
    client.force_login(user)
    page = client.get("/settings/notifications/").content.decode()
    assert '<input type="radio" name="email" value="none" required id="id_email_2" checked>' in page
    assert '<input type="radio" name="email" value="immediate" required id="id_email_0" disabled>' in page
    assert '<input type="radio" name="email" value="digest" required id="id_email_1" disabled>' in page
    refused = client.post("/settings/notifications/", {"email": "immediate"})
    assert refused.status_code == 200 and "Your account has no email address" in refused.content.decode()
    assert not NotificationPreference.objects.filter(user=user).exists()
    assert client.post("/settings/notifications/", {"email": "none"}).status_code == 302
