"""One body for every HTTP refusal, whichever door answers it."""

import pytest
from django.test import Client

from interrupts.hub import refusals
from interrupts.protocol.errors import ContractViolation, refusal_body


def test_the_body_has_code_and_detail_and_fields_only_when_some_are_invalid():
    assert refusal_body("TOO_LARGE", "Too long.") == {"code": "TOO_LARGE", "detail": "Too long."}
    assert refusal_body("INVALID_REQUEST", "Bad.", fields={"action": ["Unknown."]})["fields"] == {"action": ["Unknown."]}
    assert "fields" not in refusal_body("INVALID_REQUEST", "Bad.", fields={})


def test_a_detail_cannot_overwrite_the_code_or_the_sentence():
    problem = ContractViolation("EXPIRED", "It expired.", interrupt_id="i-1")
    problem.details["detail"] = "Something else."
    assert problem.body() == {"code": "EXPIRED", "detail": "It expired.", "interrupt_id": "i-1"}


def test_busy_says_when_to_try_again_and_the_status_follows_the_refusal():
    rendered = refusals.render(refusals.busy())
    assert (rendered.status, rendered.headers["Retry-After"]) == (503, str(refusals.BUSY_RETRY_AFTER))
    costly = refusals.render(ContractViolation("BUSY", "Checks queued.", retry_after=2))
    assert (costly.status, costly.headers["Retry-After"], costly.body["retry_after"]) == (503, "2", 2)
    assert refusals.render(ContractViolation("INVALID_PAYLOAD", "No.")).status == 400


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/api/threads/", "/agui/mailer/", "/agents/mailer/"])
def test_the_api_the_gateway_and_agent_endpoints_refuse_with_the_same_body(path):
    # A GET: each door refuses it (401 or 405) before reading anything.
    response = Client().get(path)
    assert response.status_code in (401, 405)
    body = response.json()
    assert set(body) == {"code", "detail"} and body["detail"]


def test_the_middleware_refuses_with_the_same_body():
    response = Client().get("/agui/mailer/?q=%00")
    assert response.status_code == 400
    assert response.json() == {"code": "NUL_CHARACTER", "detail": response.json()["detail"]}
