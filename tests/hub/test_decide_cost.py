"""What one decision costs the database, through the REST API as a client sends it.

The decision's own answer waits for every statement here, and the resume
waits for the answer's commit: a statement crept back in shows here first.
"""

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

from interrupts.hub import decisions
from interrupts.models import Interrupt, Run

from .. import factories as make

pytestmark = pytest.mark.django_db

SCHEMA = {"type": "object", "properties": {"approved": {"type": "boolean"}}, "required": ["approved"]}
# Token and user (one indexed lookup), the interrupt, the policies' check, the permissions (2); BEGIN, the
# re-read, the approvals, the UPDATE, the decision, the trail's subagent events, policy
# version, tail and entry, the batch, the resume's answers, its key, the resume; COMMIT;
# the inbox's count. PostgreSQL adds the batch's row lock and the trail's advisory lock.
STATEMENTS = {"sqlite": 20, "postgresql": 22}


def raised(agent, user):
    run = make.run(make.thread(agent=agent), status="interrupted", requested_by=user)
    return make.interrupt(run, interrupt_id="int-1", response_schema=SCHEMA,
                          raw={"id": "int-1", "reason": "confirmation", "responseSchema": SCHEMA})


def test_an_approval_that_sends_the_resume_costs_a_fixed_number_of_statements():
    user = make.user(username="reviewer")
    token = make.token(user)
    agent = make.agent()
    make.policy(agent=agent, allow_self_approval=True)
    client = Client()

    def approve(interrupt):
        return client.post(f"/api/interrupts/{interrupt.pk}/decide/", {"action": "approve"},
                           content_type="application/json", HTTP_AUTHORIZATION=f"Token {token}")

    assert approve(raised(agent, user)).status_code == 201  # the process reads the policies once
    interrupt = raised(agent, user)
    with CaptureQueriesContext(connection) as statements:
        assert approve(interrupt).status_code == 201
    assert len(statements) <= STATEMENTS[connection.vendor], "\n".join(q["sql"][:120] for q in statements)
    assert Interrupt.objects.get(pk=interrupt.pk).status == "resolved"
    assert Run.objects.filter(parent=interrupt.run, resume_key__isnull=False, status="queued").count() == 1


# The acknowledgement, once the decision's answer has left (``replies``): BEGIN, the interrupt's
# UPDATE, whether any answer of the batch is still unacknowledged, the held resume's read and UPDATE;
# COMMIT. PostgreSQL adds the batch's row lock.
ACKNOWLEDGEMENT = {"sqlite": 6, "postgresql": 7}


def test_the_acknowledgement_that_lets_the_resume_go_costs_a_fixed_number_of_statements(settings):
    settings.COUNTERSIGN_UNDO_SECONDS = 0
    interrupt = raised(make.agent(), None)
    decision = decisions.decide(interrupt, make.user(), "resolved", {"approved": True}, unsent=True)
    with CaptureQueriesContext(connection) as statements:
        decisions.acknowledge([decision])
    assert len(statements) <= ACKNOWLEDGEMENT[connection.vendor], "\n".join(q["sql"][:120] for q in statements)
    assert Run.objects.get(parent=interrupt.run, resume_key__isnull=False).retry_at is None  # due: it may go
