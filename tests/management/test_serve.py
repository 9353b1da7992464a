"""`manage.py serve` as `make serve` runs it: a real daphne process on a free port."""

import re

import httpx


def test_serve_answers_with_the_login_page(served):
    response = httpx.get(f"{served.url}/accounts/login/")
    assert response.status_code == 200
    assert 'name="username"' in response.text


def test_serve_sends_anonymous_visitors_of_the_admin_to_log_in(served):
    response = httpx.get(f"{served.url}/admin/")
    assert response.status_code == 302
    assert "/admin/login/" in response.headers["location"]


def test_serve_serves_static_files(served):
    response = httpx.get(f"{served.url}/static/interrupts/countersign.css")
    assert response.status_code == 200
    assert "--accent" in response.text


def test_the_demo_reviewer_logs_in_and_reaches_the_admin(served):
    with httpx.Client(base_url=served.url, follow_redirects=False) as browser:
        page = browser.get("/accounts/login/")
        token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page.text).group(1)
        response = browser.post(
            "/accounts/login/",
            data={"username": "reviewer", "password": "countersign", "csrfmiddlewaretoken": token},
            headers={"Referer": f"{served.url}/accounts/login/"},
        )
        assert response.status_code == 302, response.text
        assert browser.get("/inbox/").status_code == 200
        admin = browser.get("/admin/")
        assert admin.status_code == 200
        assert "Countersign" in admin.text


def test_a_post_without_a_csrf_token_is_refused(served):
    response = httpx.post(f"{served.url}/accounts/login/", data={"username": "reviewer", "password": "countersign"})
    assert response.status_code == 403
