"""Guessing is slow: failed logins lock a username at an address out; API tokens and callers are throttled."""

import pytest
from django.conf import settings
from django.core.cache import cache
from rest_framework.test import APIClient
from rest_framework.throttling import UserRateThrottle

from interrupts.hub.tokens import FailedTokenThrottle

from .. import factories

pytestmark = pytest.mark.django_db

PASSWORD = "pw-for-tests-only"


@pytest.fixture(autouse=True)
def fresh_counts():
    cache.clear()  # DRF throttles count in the cache; axes counts in its tables (rolled back per test)
    yield
    cache.clear()


def log_in(client, url, username, password, address="10.0.0.1", **headers):
    return client.post(url, {"username": username, "password": password}, REMOTE_ADDR=address, **headers)


# --- logins (django-axes) ------------------------------------------------------------


@pytest.mark.parametrize("url", ["/accounts/login/", "/admin/login/"])
def test_failed_logins_lock_that_username_at_that_address_out(client, url):
    user = factories.user(is_staff=True)
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        assert log_in(client, url, user.username, "wrong").status_code == 200  # the form again, with the error
    locked = log_in(client, url, user.username, "wrong")
    assert locked.status_code == 429
    assert int(locked["Retry-After"]) == int(settings.AXES_COOLOFF_TIME.total_seconds())
    text = locked.content.decode()
    assert "Too many failed logins" in text and "Try again in 15 minutes" in text
    assert '<html' in text and "Countersign" in text  # the site's own page (base.html), not a bare message
    # Even the right password waits now, from that address.
    assert log_in(client, url, user.username, PASSWORD).status_code == 429
    # The same user from elsewhere, and another user from there, are not locked out by it.
    assert log_in(client, url, user.username, PASSWORD, address="10.0.0.2").status_code == 302
    other = factories.user()
    assert log_in(client, "/accounts/login/", other.username, PASSWORD).status_code == 302


def test_a_client_written_forwarded_for_does_not_make_a_fresh_address(client):
    user = factories.user()
    for n in range(settings.AXES_FAILURE_LIMIT):
        log_in(client, "/accounts/login/", user.username, "wrong", HTTP_X_FORWARDED_FOR=f"192.0.2.{n}")
    assert log_in(client, "/accounts/login/", user.username, PASSWORD,
                  HTTP_X_FORWARDED_FOR="192.0.2.200").status_code == 429


def test_a_successful_login_starts_the_count_again(client):
    user = factories.user()
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        log_in(client, "/accounts/login/", user.username, "wrong")
    assert log_in(client, "/accounts/login/", user.username, PASSWORD).status_code == 302
    client.logout()
    for _ in range(settings.AXES_FAILURE_LIMIT - 1):
        assert log_in(client, "/accounts/login/", user.username, "wrong").status_code == 200


# --- API tokens ----------------------------------------------------------------------


@pytest.fixture
def three_failures_a_minute(monkeypatch):
    monkeypatch.setattr(FailedTokenThrottle, "rate", "3/min", raising=False)


def with_token(key, address="10.0.0.1"):
    api = APIClient(REMOTE_ADDR=address)
    api.credentials(HTTP_AUTHORIZATION=f"Token {key}")
    return api


def test_failed_tokens_from_one_address_are_throttled(three_failures_a_minute):
    good = factories.token(factories.user())
    for n in range(3):
        refused = with_token(f"guess-{n}").get("/api/interrupts/")
        assert refused.status_code == 401 and refused.json()["code"] == "AUTHENTICATION_FAILED"
    throttled = with_token("guess-4").get("/api/interrupts/")
    assert throttled.status_code == 429
    assert throttled.json()["code"] == "THROTTLED"
    assert "Too many failed token attempts" in throttled.json()["detail"]
    assert 1 <= int(throttled["Retry-After"]) <= 60
    # That address waits whatever it sends (its next key is not even looked up)...
    assert with_token(good).get("/api/interrupts/").status_code == 429
    # ...while another address, with a valid token, is served.
    assert with_token(good, address="10.0.0.2").get("/api/interrupts/").status_code == 200


def test_a_forwarded_for_header_does_not_reset_the_count(three_failures_a_minute):
    for n in range(3):
        with_token(f"guess-{n}").get("/api/interrupts/", HTTP_X_FORWARDED_FOR=f"192.0.2.{n}")
    assert with_token("guess").get("/api/interrupts/", HTTP_X_FORWARDED_FOR="192.0.2.99").status_code == 429


def test_valid_tokens_are_not_counted_as_failures(three_failures_a_minute):
    good = factories.token(factories.user())
    for _ in range(10):
        assert with_token(good).get("/api/interrupts/").status_code == 200


def test_a_runaway_caller_is_throttled(monkeypatch):
    monkeypatch.setattr(UserRateThrottle, "rate", "2/min", raising=False)
    api = with_token(factories.token(factories.user()))
    assert [api.get("/api/interrupts/").status_code for _ in range(2)] == [200, 200]
    throttled = api.get("/api/interrupts/")
    assert throttled.status_code == 429 and throttled.json()["code"] == "THROTTLED"
    assert int(throttled["Retry-After"]) >= 1


def test_the_default_rates_leave_room_for_a_busy_team():
    rates = settings.REST_FRAMEWORK["DEFAULT_THROTTLE_RATES"]
    assert rates["user"] == "6000/min" and rates["failed_token"] == "30/min"


def test_failed_tokens_at_the_gateway_count_with_the_api_s(three_failures_a_minute, client):
    # The AG-UI gateway checks tokens itself: it must not be a faster door for guessing them.
    for n in range(3):
        refused = client.post("/agui/nobody/", data="{}", content_type="application/json",
                              HTTP_AUTHORIZATION=f"Bearer guess-{n}", REMOTE_ADDR="10.0.0.7")
        assert refused.status_code == 401, refused.content
    throttled = client.post("/agui/nobody/", data="{}", content_type="application/json",
                            HTTP_AUTHORIZATION="Bearer guess-4", REMOTE_ADDR="10.0.0.7")
    assert throttled.status_code == 429 and throttled.json()["code"] == "THROTTLED"
    assert int(throttled["Retry-After"]) >= 1
    assert with_token("guess-5", address="10.0.0.7").get("/api/interrupts/").status_code == 429
