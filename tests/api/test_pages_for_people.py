"""The API's pages for people (the browsable root, the docs): Countersign's, with a way back to the app."""

import pytest

from .. import factories as make

pytestmark = pytest.mark.django_db


@pytest.fixture
def person(client):
    client.force_login(make.user())
    return client


@pytest.mark.parametrize("path", ["/api/", "/api/interrupts/", "/api/docs/"])
def test_each_links_back_to_the_inbox(person, path):
    page = person.get(path, HTTP_ACCEPT="text/html")
    assert page.status_code == 200 and page["Content-Type"].startswith("text/html")
    body = page.content.decode()
    assert 'href="/inbox/" data-testid="back-to-app"' in body
    assert "Django REST framework" not in body.split("</title>")[0]


def test_json_clients_still_get_json(person):
    answer = person.get("/api/", HTTP_ACCEPT="application/json")
    assert answer["Content-Type"] == "application/json" and "interrupts" in answer.json()
