"""The Passkeys page lists and removes only your own; an operator removes a lost one in the admin."""

import base64

import pytest
from django.urls import reverse

from interrupts.hub import runs
from interrupts.hub.trail import chain
from interrupts.models import Passkey
from interrupts.protocol import signing

from .. import factories as make

pytestmark = pytest.mark.django_db


def key(user, name="laptop") -> Passkey:
    return Passkey.objects.create(user=user, name=name, credential_id=f"cred-{name}-{user.pk}", public_key="pk")


def test_the_page_lists_your_passkeys_and_removes_yours_only(client):
    me, other = make.user(), make.user()
    mine, theirs = key(me), key(other, "phone")
    client.force_login(me)
    page = client.get(reverse("passkeys")).content.decode()
    assert "laptop" in page and "phone" not in page
    assert client.post(reverse("passkey-remove", args=[theirs.pk])).status_code == 404
    assert client.post(reverse("passkey-remove", args=[mine.pk])).status_code == 302
    assert list(Passkey.objects.values_list("name", flat=True)) == ["phone"]


def test_an_operator_removes_a_lost_passkey_in_the_admin_and_adds_none(client):
    lost = key(make.user())
    client.force_login(make.user(is_staff=True, is_superuser=True))
    assert client.get(reverse("admin:interrupts_passkey_add")).status_code == 403
    done = client.post(reverse("admin:interrupts_passkey_delete", args=[lost.pk]), {"post": "yes"})
    assert done.status_code == 302 and not Passkey.objects.exists()


def test_only_who_may_decide_a_request_is_given_a_challenge_to_sign_it(client):
    agent, member, outsider = make.agent(), make.user(), make.user()
    make.policy(agent=agent, users=[member], restricted=True, require_passkey=True)
    interrupt = make.interrupt(make.run(make.thread(agent=agent), status="interrupted"))
    url = reverse("passkey-approval", args=[interrupt.pk])
    for person in (member, outsider):
        credential = base64.urlsafe_b64encode(f"credential-{person.pk}".encode()).rstrip(b"=").decode()
        Passkey.objects.create(user=person, name="laptop", credential_id=credential, public_key="pk")
    client.force_login(outsider)
    refused = client.post(url, {"action": "approve"})
    assert (refused.status_code, refused.json()["code"]) == (403, "NOT_ELIGIBLE")
    client.force_login(member)
    given = client.post(url, {"action": "approve"})
    assert given.status_code == 200 and given.json()["challenge"]



def test_a_plain_approval_joining_a_quorum_is_signed_over_the_answer_it_joins(client):
    # Bob's approval will take Alice's edited args (decisions._take): his passkey must sign those.
    agent, alice, bob = make.agent(), make.user(), make.user()
    policy = make.policy(agent=agent, required_approvals=2, require_passkey=True)
    interrupt = make.interrupt(make.run(make.thread(agent=agent), status="interrupted"), tool_call_id="call-1",
                               tool_name="send_email", proposed_args={"to": "a@y.z"})
    edited = {"approved": True, "editedArgs": {"to": "alice@y.z"}}
    make.decision(interrupt, alice, payload=edited, action="edit")
    Passkey.objects.create(user=bob, name="laptop", credential_id="Y3JlZA", public_key="pk")
    client.force_login(bob)
    given = client.post(reverse("passkey-approval", args=[interrupt.pk]), {"action": "approve"})
    assert given.status_code == 200, given.content
    fingerprint = runs.answer_fingerprint(interrupt, interrupt.run.thread.thread_id, "resolved", edited)
    expected = signing.passkey_challenge(fingerprint, chain.policy_version(policy.name))
    assert given.json()["challenge"] == base64.urlsafe_b64encode(expected).rstrip(b"=").decode()


def test_adding_a_passkey_takes_the_password_and_wrong_ones_lock_out_as_at_log_in(client, settings):
    from interrupts.hub import passkeys

    client.force_login(make.user())
    url = reverse("passkey-options")
    refused = client.post(url, {"password": "a guess"})
    assert (refused.status_code, refused.json()["code"]) == (403, "PASSWORD_NEEDED")
    assert passkeys.REGISTERING not in client.session  # no ceremony started: nothing to register against
    given = client.post(url, {"password": "pw-for-tests-only"})
    assert given.status_code == 200 and given.json()["challenge"] == client.session[passkeys.REGISTERING]
    # A stolen session guessing the password is locked out like a login: even the right one is refused then.
    for _ in range(settings.AXES_FAILURE_LIMIT):
        client.post(url, {"password": "another guess"})
    locked = client.post(url, {"password": "pw-for-tests-only"}, headers={"Accept": "application/json"})
    assert (locked.status_code, locked.json()["code"]) == (429, "LOCKED_OUT") and locked["Retry-After"]
    assert "try again in" in locked.json()["detail"]
