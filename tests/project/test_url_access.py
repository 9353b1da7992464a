"""Every door of the site is closed to strangers, found by walking the URL patterns, not by a hand list.

Each pattern of ``get_resolver()`` (admin, accounts, the API's router, its
schema and docs, the gateway, the demo agents, the pages) is filled with real
rows and requested with GET and POST, anonymously and as a logged-in user
without staff rights. A pattern someone adds later is walked too: unless it
refuses strangers the way its door should, or is added to ``PUBLIC`` with a
reason, this test fails.
"""

import re
from dataclasses import dataclass

import pytest
from django.contrib.auth.models import Group
from django.contrib.contenttypes.models import ContentType
from django.urls import URLResolver, get_resolver, resolve
from django.utils.regex_helper import normalize

from interrupts.models import Agent

from .. import factories

pytestmark = pytest.mark.django_db

# Patterns anyone may call, by their route (as Django's regex, ^ and \Z dropped), each with its reason.
PUBLIC = {
    r"accounts/login/": "the login page: how a stranger stops being one",
    r"admin/login/": "the admin's login page, the same for staff",
    r"agents/(?P<name>)": "the demo agents: Countersign calls them itself over HTTP, they hold no data",
}
# Under /api/ but for people, not machines: refused like every page, with a redirect to log in.
PAGES_UNDER_API = ("api/docs/",)  # Swagger UI
# Static files are served by WhiteNoise in front of Django, by no URL pattern: also public, on purpose.


def _public_reason(route: str) -> str | None:
    for prefix, reason in PUBLIC.items():
        if route.startswith(prefix.replace("(?P<name>)", "")):
            return reason
    return None


@dataclass
class Door:
    route: str  # the pattern's full regex, for messages and the allow-list
    url: str
    callback: object

    @property
    def api(self) -> bool:
        # /metrics: Prometheus's default path to the metrics door, a machine's like /api/metrics/.
        return ((self.url.startswith("/api/") and not self.route.startswith(PAGES_UNDER_API))
                or self.route == "metrics\\Z")

    @property
    def gateway(self) -> bool:
        return self.url.startswith("/agui/")

    @property
    def admin(self) -> bool:
        return self.url.startswith("/admin/")


def _leaves(resolver, prefix=""):
    for pattern in resolver.url_patterns:
        regex = prefix + pattern.pattern.regex.pattern.removeprefix("^")
        if isinstance(pattern, URLResolver):
            yield from _leaves(pattern, regex)
        else:
            yield regex, pattern


@pytest.fixture
def rows(db):
    """One real row of everything a path can name."""
    user = factories.user(username="doors-owner")
    interrupt = factories.interrupt()
    run = interrupt.run
    factories.event(run, 1)
    factories.decision(interrupt, user)
    factories.token(user)
    Group.objects.create(name="doors")
    return {"interrupt": interrupt, "run": run, "thread": run.thread, "agent": run.agent, "user": user}


def _value(name: str, fmt: str, route: str, callback, rows) -> str:
    """A real value for the path parameter ``name`` of the route ``fmt``."""
    # The admin's views carry their ModelAdmin (or are its bound methods, wrapped by admin_view).
    model_admin = getattr(callback, "model_admin", None) or getattr(getattr(callback, "__wrapped__", None),
                                                                    "__self__", None)
    if name in ("object_id", "id") and model_admin is not None:
        found = model_admin.model._default_manager.first()
        return str(found.pk) if found else "1"
    if name == "pk":
        return str(rows["run"].pk if "runs/" in fmt else rows["interrupt"].pk)
    known = {
        "thread_id": rows["thread"].thread_id,
        "run_id": rows["run"].run_id,
        "name": rows["agent"].name,
        "agent": rows["agent"].name,
        "format": ".json" if r"(?P<format>\." in route else "json",  # the API root's suffix holds its dot
        "app_label": "interrupts",
        "content_type_id": str(ContentType.objects.get_for_model(Agent).pk),
        "object_id": str(rows["agent"].pk),  # with content_type_id: the admin's "view on site"
        "url": "no-such-admin-page/",
        "token": "not-a-link-token",  # a decision link's: unknown, refused once logged in
    }
    if name not in known:
        raise AssertionError(f"{fmt}: this test does not know what to put in <{name}>; teach _value.")
    return known[name]


def doors(rows) -> list[Door]:
    found = []
    for route, pattern in _leaves(get_resolver()):
        for fmt, params in normalize(route):
            url = "/" + fmt % {name: _value(name, fmt, route, pattern.callback, rows) for name in params}
            if not route.endswith(("\\Z", "$")):
                url += "no/such.door"  # a catch-all (a prefix only): a path no pattern before it takes
            match = resolve(url)
            assert match.func == pattern.callback, f"{route}: filled as {url}, which resolves elsewhere"
            found.append(Door(route, url, pattern.callback))
    return found


def _json_refusal(response, status: int, sentence: str = "detail"):
    """A refusal machines can read: JSON with a code and a sentence, the same body on every door."""
    assert response.status_code == status, f"{response.status_code} {response.content[:300]!r}"
    assert response["Content-Type"].startswith("application/json"), response["Content-Type"]
    body = response.json()
    assert {"code", sentence} <= body.keys(), body
    assert re.fullmatch(r"[A-Z_]+", body["code"]) and body[sentence]


LOGIN_PAGES = ("/accounts/login/?next=", "/admin/login/?next=")


def _to_login(response, door: Door):
    assert response.status_code == 302, f"{response.status_code} {response.content[:200]!r}"
    # The site's login page, or the admin's own (the admin, and staff_member_required pages): both ask for one.
    assert response["Location"].startswith(LOGIN_PAGES), response["Location"]


def test_every_pattern_is_walked(rows):
    found = doors(rows)
    routes = {door.route for door in found}
    # The walk reaches every room, so a room added under any of them is checked.
    for expected in ["admin/", "accounts/password_change/", "api/agents/", "api/schema/", "api/docs/",
                     "agui/", "agents/mailer/", "inbox/"]:
        assert any(route.startswith(expected) for route in routes), expected
    # Every allow-list entry names a pattern that exists: no stale exceptions.
    for prefix in PUBLIC:
        assert any(_public_reason(route) == PUBLIC[prefix] for route in routes), prefix


def test_password_reset_is_not_served(client):
    # It would let anyone make the server send mail, and there is no mail set-up.
    assert client.get("/accounts/password_reset/").status_code == 404
    from django.urls import NoReverseMatch, reverse

    with pytest.raises(NoReverseMatch):
        reverse("password_reset")


@pytest.fixture
def client(client):
    client.raise_request_exception = False  # a 500 is a finding like any other, listed with the rest
    return client


@pytest.mark.parametrize("method", ["get", "post"])
def test_strangers_are_refused_at_every_door(client, rows, method):
    problems = []
    for door in doors(rows):
        response = getattr(client, method)(door.url)
        try:
            assert response.status_code < 500, response.status_code
            if _public_reason(door.route):
                continue
            if door.api:
                _json_refusal(response, 401)
                assert response["WWW-Authenticate"]
            elif door.gateway:
                if door.route.startswith("agui/(?P<agent>"):
                    # GET is refused for its method before anyone is asked to log in: it names no data.
                    _json_refusal(response, 401 if method == "post" else 405)
                else:
                    _json_refusal(response, 404)  # no endpoint there, for anyone
            else:
                _to_login(response, door)
        except AssertionError as problem:
            problems.append(f"anonymous {method.upper()} {door.url} ({door.route}): {problem}")
    assert not problems, "\n".join(problems)


def _staff_only(door: Door, method: str) -> bool:
    if door.admin:
        return not _public_reason(door.route)
    if door.route.startswith("registry/"):
        return door.route != "registry/\\Z"  # reading the registry is for everyone; adding and editing, staff
    if door.route.startswith("api/metrics/") or door.route == "metrics\\Z":
        return True  # the figures name every agent and reason: staff and their tokens only
    return door.api and door.route.startswith("api/agents") and method == "post"


@pytest.mark.parametrize("method", ["get", "post"])
def test_colleagues_without_staff_rights_are_refused_at_staff_doors(client, rows, method):
    colleague = factories.user(username="colleague")
    problems = []
    for door in doors(rows):
        client.force_login(colleague)  # again each time: one of the doors is the logout
        response = getattr(client, method)(door.url)
        try:
            assert response.status_code < 500, response.status_code
            if _staff_only(door, method):
                if door.api:
                    _json_refusal(response, 403)
                elif door.admin:
                    assert response.status_code in (302, 403)
                    if response.status_code == 302 and response["Location"] == "/admin/":
                        # The admin's logout sends a non-staff user to its index, which refuses in turn.
                        response = client.get("/admin/")
                    if response.status_code == 302:
                        assert response["Location"].startswith(LOGIN_PAGES), response["Location"]
                else:
                    _to_login(response, door)  # staff_member_required: to the admin's login page
            elif door.api and response.status_code >= 400:
                _json_refusal(response, response.status_code)
        except AssertionError as problem:
            problems.append(f"non-staff {method.upper()} {door.url} ({door.route}): {problem}")
    assert not problems, "\n".join(problems)


# --- HTTPS: a client's own X-Forwarded-Proto opens no door ---------------------------------


class ProxiedApp:
    """`manage.py serve` with production settings, with or without --proxy-headers."""

    def __init__(self, workdir, proxy_headers: bool):
        from ..servers import ServedApp

        self.app = ServedApp(workdir, DEBUG="false", ALLOWED_HOSTS="127.0.0.1",
                             SECRET_KEY="x7Kq9vP2mR8sT4wY6zA1bC3dE5fG7hJ9kL0nM2pQ4rS6tU8vW0xY2z")
        self.proxy_headers = proxy_headers

    def __enter__(self):
        import subprocess
        import sys

        from ..servers import ROOT, manage

        self.app.empty_database()
        done = manage("migrate", "--noinput", env=self.app.env)  # no demo login: it refuses DEBUG off
        assert done.returncode == 0, done.stderr
        flags = ["--proxy-headers"] if self.proxy_headers else []
        with open(self.app.log, "w") as log:
            self.app.process = subprocess.Popen(
                [sys.executable, "manage.py", "serve", "--port", str(self.app.port), *flags],
                cwd=ROOT, env=self.app.env, stdout=log, stderr=subprocess.STDOUT)
        self.app.ready()
        return self.app

    def __exit__(self, *exc):
        self.app.stop()


@pytest.mark.backend_free  # the scheme a proxy says is the same on either back end
@pytest.mark.django_db(transaction=True)
def test_a_client_claiming_https_is_still_redirected_to_it(tmp_path):
    import httpx

    with ProxiedApp(tmp_path, proxy_headers=False) as app:
        response = httpx.get(f"{app.url}/api/", headers={"X-Forwarded-Proto": "https", "X-Forwarded-For": "1.2.3.4"})
        assert response.status_code == 301
        assert response.headers["location"] == f"https://127.0.0.1:{app.port}/api/"


@pytest.mark.backend_free  # the scheme a proxy says is the same on either back end
@pytest.mark.django_db(transaction=True)
def test_behind_a_proxy_serve_takes_the_scheme_the_proxy_sends(tmp_path):
    import httpx

    with ProxiedApp(tmp_path, proxy_headers=True) as app:
        # daphne takes X-Forwarded-Proto together with X-Forwarded-For, as a proxy sends them.
        proxied = httpx.get(f"{app.url}/api/", headers={"X-Forwarded-Proto": "https", "X-Forwarded-For": "1.2.3.4"})
        assert proxied.status_code == 401 and proxied.json()["code"] == "NOT_AUTHENTICATED"
        plain = httpx.get(f"{app.url}/api/", headers={"X-Forwarded-For": "1.2.3.4"})
        assert plain.status_code == 301
