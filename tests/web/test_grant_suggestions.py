"""A card offers a standing grant once the team approved calls identical to it enough times and refused none."""

import pytest

from .. import factories as make

pytestmark = pytest.mark.django_db

SUGGESTED = "Your team approved this exact call"


@pytest.fixture
def seen(client, settings):
    settings.COUNTERSIGN_GRANT_SUGGEST_AFTER = 2
    reviewer = make.user(username="rita")
    client.force_login(reviewer)
    agent = make.agent(name="ops")

    def call(args, action=None):
        asked = make.interrupt(make.run(make.thread(agent=agent), status="interrupted"), interrupt_id="run-deploy",
                               reason="tool_call", tool_name="deploy", tool_call_id="tc-1", proposed_args=args)
        if action is not None:
            status = "cancelled" if action == "cancel" else "resolved"
            make.decision(asked, reviewer, status=status, action=action,
                          payload=None if action == "cancel" else {"approved": action == "approve"})
            asked.status = "resolved" if action == "approve" else "cancelled"
            asked.save()
        return asked

    def page() -> str:
        return client.get("/inbox/", {"scope": "all", "agent": "ops"}).content.decode()

    return call, page


def test_after_enough_identical_approvals_the_card_offers_a_grant_with_the_count(seen):
    call, page = seen
    call({"env": "staging"}, "approve")
    call({"env": "production"}, "approve")  # other args: not the same call
    call({"env": "staging"})
    assert SUGGESTED not in page()
    call({"env": "staging"}, "approve")
    shown = page()
    assert f"{SUGGESTED} 2 times" in shown
    assert 'data-testid="grant" open' in shown


def test_one_refusal_of_the_same_call_withdraws_the_offer(seen):
    call, page = seen
    for _ in range(3):
        call({"env": "staging"}, "approve")
    call({"env": "staging"}, "reject")
    call({"env": "staging"})
    assert SUGGESTED not in page()


def test_zero_never_offers(seen, settings):
    call, page = seen
    settings.COUNTERSIGN_GRANT_SUGGEST_AFTER = 0
    for _ in range(3):
        call({"env": "staging"}, "approve")
    call({"env": "staging"})
    assert SUGGESTED not in page()
