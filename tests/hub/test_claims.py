"""Claims and presence: who is reviewing a card, who has it open, and what a colleague must confirm."""

from datetime import timedelta

import pytest
from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.utils import timezone
from rest_framework.test import APIClient

from interrupts.hub import claims, decisions
from interrupts.hub.refusals import Refusal
from interrupts.live import relay
from interrupts.models import AuditEntry, Interrupt, Presence

from .. import factories as make

pytestmark = pytest.mark.django_db(transaction=True)

SCHEMA = {"type": "object", "properties": {"approved": {"type": "boolean"}}, "required": ["approved"]}


_ids = iter(range(10**6))


def pending(agent=None):
    run = make.run(make.thread(agent=agent or make.agent()), status="interrupted")
    interrupt_id = f"claim-{next(_ids)}"
    return make.interrupt(run, interrupt_id=interrupt_id, response_schema=SCHEMA,
                          raw={"id": interrupt_id, "reason": "confirmation", "responseSchema": SCHEMA})


def fresh(interrupt):
    return Interrupt.objects.select_related("run", "claimed_by").get(pk=interrupt.pk)


def kinds(interrupt):
    return list(AuditEntry.objects.filter(interrupt_id=interrupt.pk).order_by("seq").values_list("kind", flat=True))


def test_a_claim_names_its_holder_and_bars_a_colleague_only_until_they_confirm():
    interrupt = pending()
    alice, bob = make.user(first_name="Alice"), make.user(first_name="Bob")
    held = claims.claim(interrupt, alice)
    assert (held.by, held.name) == (alice.username, "Alice")
    assert claims.shown(fresh(interrupt)).by == alice.username

    with pytest.raises(Refusal) as refused:
        decisions.decide(interrupt, bob, "resolved", {"approved": True}, claim_confirmed=False)
    assert refused.value.code == "CLAIMED" and "Alice is reviewing" in refused.value.message
    assert refused.value.details["claimed_by"] == alice.username
    assert fresh(interrupt).status == "pending"

    decisions.decide(interrupt, bob, "resolved", {"approved": True}, claim_confirmed=True)
    assert fresh(interrupt).status == "resolved"
    assert claims.shown(fresh(interrupt)) is None  # a decided card has no claim to show
    assert kinds(interrupt) == [claims.CLAIM_TAKEN, "decision"]


def test_the_holder_decides_their_own_claim_without_confirming():
    interrupt = pending()
    alice = make.user()
    claims.claim(interrupt, alice)
    decisions.decide(interrupt, alice, "resolved", {"approved": True}, claim_confirmed=False)
    assert fresh(interrupt).status == "resolved"


def test_a_colleague_s_claim_is_taken_over_only_when_asked_and_the_trail_says_from_whom():
    interrupt = pending()
    alice, bob = make.user(), make.user()
    claims.claim(interrupt, alice)
    with pytest.raises(Refusal) as refused:
        claims.claim(interrupt, bob)
    assert refused.value.code == "CLAIMED" and "take it over to claim it" in refused.value.message
    claims.claim(interrupt, bob, take_over=True)
    assert fresh(interrupt).claimed_by == bob
    entry = AuditEntry.objects.filter(interrupt_id=interrupt.pk).order_by("-seq").first()
    assert entry.kind == claims.CLAIM_TAKEN and f'"takenFrom":"{alice.username}"' in entry.content


def test_claiming_again_renews_without_a_new_entry():
    interrupt = pending()
    alice = make.user()
    claims.claim(interrupt, alice)
    Interrupt.objects.filter(pk=interrupt.pk).update(claim_renewed_at=timezone.now() - timedelta(minutes=10))
    claims.claim(interrupt, alice)
    assert fresh(interrupt).claim_renewed_at > timezone.now() - timedelta(seconds=5)
    assert kinds(interrupt) == [claims.CLAIM_TAKEN]


def test_only_someone_who_may_decide_may_claim():
    agent = make.agent()
    make.policy(agent=agent, users=[make.user()], restricted=True)
    interrupt = pending(agent)
    with pytest.raises(Refusal) as refused:
        claims.claim(interrupt, make.user())
    assert refused.value.code == "NOT_ELIGIBLE"
    with pytest.raises(Refusal) as refused:
        claims.claim(interrupt, make.user(reviewer=False))
    assert refused.value.code == "NOT_ELIGIBLE"


def test_a_decided_card_cannot_be_claimed():
    interrupt = pending()
    decisions.decide(interrupt, make.user(), "resolved", {"approved": True})
    with pytest.raises(Refusal) as refused:
        claims.claim(interrupt, make.user())
    assert refused.value.code == "CLOSED"


def test_an_idle_claim_lapses_at_once_for_readers_and_is_recorded_once_by_the_sweep(settings):
    settings.COUNTERSIGN_CLAIM_IDLE_SECONDS = 60
    interrupt = pending()
    alice, bob = make.user(), make.user()
    claims.claim(interrupt, alice)
    Interrupt.objects.filter(pk=interrupt.pk).update(claim_renewed_at=timezone.now() - timedelta(seconds=61))
    assert claims.shown(fresh(interrupt)) is None
    decisions.decide(interrupt, bob, "resolved", {"approved": False}, claim_confirmed=False)  # nothing to confirm
    other = pending()
    claims.claim(other, alice)
    Interrupt.objects.filter(pk=other.pk).update(claim_renewed_at=timezone.now() - timedelta(seconds=61))
    assert claims.lapse_due() == 2  # the decided card's stale claim is cleared too, without an entry
    assert claims.lapse_due() == 0
    assert fresh(other).claimed_by is None
    assert kinds(other) == [claims.CLAIM_TAKEN, claims.CLAIM_LAPSED]
    assert claims.CLAIM_LAPSED not in kinds(interrupt)


def test_release_is_the_holder_s_or_staff_s():
    interrupt = pending()
    alice, bob = make.user(), make.user()
    with pytest.raises(Refusal) as refused:
        claims.release(interrupt, alice)
    assert refused.value.code == "NOT_CLAIMED"
    claims.claim(interrupt, alice)
    with pytest.raises(Refusal) as refused:
        claims.release(interrupt, bob)
    assert (refused.value.code, refused.value.status) == ("CLAIMED", 403)
    claims.release(interrupt, make.user(is_staff=True))
    assert fresh(interrupt).claimed_by is None
    assert kinds(interrupt) == [claims.CLAIM_TAKEN, claims.CLAIM_RELEASED]


def test_bulk_skips_a_colleague_s_claimed_card_unless_confirmed():
    agent = make.agent()
    free, held = pending(agent), pending(agent)
    alice, bob = make.user(), make.user()
    claims.claim(held, alice)
    loaded = list(Interrupt.objects.select_related("run").filter(pk__in=[free.pk, held.pk]).order_by("pk"))
    done = decisions.decide_many(loaded, bob, "approve")
    assert [i.pk for i, p in done.skipped if p.code == "CLAIMED"] == [held.pk]
    assert "(CLAIMED)" in done.summary
    again = decisions.decide_many(list(Interrupt.objects.select_related("run").filter(pk=held.pk)), bob, "approve",
                                  claim_confirmed=True)
    assert len(again.decided) == 1


def test_presence_follows_what_each_socket_has_open_and_renews_the_holder_s_claim(settings):
    settings.COUNTERSIGN_CLAIM_IDLE_SECONDS = 60
    first, second = pending(), pending()
    alice, bob = make.user(first_name="Alice"), make.user()
    claims.claim(first, alice)
    Interrupt.objects.filter(pk=first.pk).update(claim_renewed_at=timezone.now() - timedelta(seconds=50))
    assert claims.viewing(alice, "sock-a", [first.pk]) == {first.pk}
    assert fresh(first).claim_renewed_at > timezone.now() - timedelta(seconds=5)  # having it open is working on it
    claims.viewing(bob, "sock-b", [first.pk, second.pk, 10**12])  # an unknown card is ignored
    assert claims.viewers([first.pk, second.pk]) == {
        first.pk: sorted([(alice.username, "Alice"), (bob.username, bob.username)]),
        second.pk: [(bob.username, bob.username)]}
    assert claims.viewing(bob, "sock-b", [second.pk]) == {first.pk}
    assert claims.left("sock-b") == {second.pk}
    assert claims.viewers([first.pk, second.pk]) == {first.pk: [(alice.username, "Alice")]}
    # A page that died without closing its socket goes stale.
    Presence.objects.update(seen_at=timezone.now() - timedelta(seconds=settings.COUNTERSIGN_PRESENCE_SECONDS + 1))
    assert claims.viewers([first.pk]) == {}
    claims.lapse_due()
    assert not Presence.objects.exists()


def test_a_page_names_at_most_a_bounded_number_of_cards():
    cards = [pending() for _ in range(3)]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(claims, "MAX_PRESENCE_CARDS", 2)
        claims.viewing(make.user(), "sock", [c.pk for c in cards])
    assert Presence.objects.count() == 2


def test_every_change_is_told_to_open_inboxes_with_who_holds_and_who_looks():
    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(relay.INBOX_GROUP, channel)
    interrupt = pending()
    alice = make.user(first_name="Alice")
    claims.claim(interrupt, alice)
    heard = [async_to_sync(layer.receive)(channel) for _ in range(2)]
    attention = next(m for m in heard if m["type"] == "inbox.attention")
    changed = next(m for m in heard if m["type"] == "inbox.changed")
    assert attention["interrupt"] == interrupt.pk and attention["claim"]["name"] == "Alice"
    assert changed["reason"] == "claimed"
    claims.viewing(alice, "sock", [interrupt.pk])
    looked = async_to_sync(layer.receive)(channel)
    assert looked["type"] == "inbox.attention" and looked["viewers"] == [{"by": alice.username, "name": "Alice"}]


def test_the_api_claims_releases_and_decides_with_confirmation():
    interrupt = pending()
    alice, bob = make.user(first_name="Alice"), make.user()
    as_alice, as_bob = APIClient(), APIClient()
    as_alice.force_authenticate(alice)
    as_bob.force_authenticate(bob)
    response = as_alice.post(f"/api/interrupts/{interrupt.pk}/claim/", {}, format="json")
    assert response.status_code == 200 and response.json()["by"] == alice.username
    shown = as_bob.get(f"/api/interrupts/{interrupt.pk}/").json()
    assert shown["claim"]["name"] == "Alice"
    listed = as_bob.get("/api/interrupts/").json()["results"]
    assert [i["claim"]["by"] for i in listed] == [alice.username]

    refused = as_bob.post(f"/api/interrupts/{interrupt.pk}/claim/", {}, format="json")
    assert refused.status_code == 409 and refused.json()["code"] == "CLAIMED"
    refused = as_bob.post(f"/api/interrupts/{interrupt.pk}/decide/", {"action": "approve"}, format="json")
    assert refused.status_code == 409 and refused.json()["claimed_by"] == alice.username
    assert as_bob.post(f"/api/interrupts/{interrupt.pk}/release/").status_code == 403
    assert as_alice.post(f"/api/interrupts/{interrupt.pk}/release/").status_code == 204
    assert as_alice.post(f"/api/interrupts/{interrupt.pk}/release/").json()["code"] == "NOT_CLAIMED"
    as_alice.post(f"/api/interrupts/{interrupt.pk}/claim/", {}, format="json")
    done = as_bob.post(f"/api/interrupts/{interrupt.pk}/decide/", {"action": "approve", "confirm_claim": True},
                       format="json")
    assert done.status_code == 201, done.content


def test_having_a_card_open_renews_a_claim_only_while_its_holder_may_still_decide(settings):
    # A reviewer removed from Reviewers (or deactivated) with the inbox still open must not keep
    # their claim alive forever, making every colleague confirm against someone who cannot decide.
    settings.COUNTERSIGN_CLAIM_IDLE_SECONDS = 60
    interrupt = pending()
    alice = make.user()
    claims.claim(interrupt, alice)
    stale = timezone.now() - timedelta(seconds=50)
    Interrupt.objects.filter(pk=interrupt.pk).update(claim_renewed_at=stale)
    alice.groups.clear()  # the socket's user object still holds the groups it was read with
    claims.viewing(alice, "sock-a", [interrupt.pk])
    assert fresh(interrupt).claim_renewed_at == stale
    type(alice).objects.filter(pk=alice.pk).update(is_active=False)
    claims.viewing(alice, "sock-a", [interrupt.pk])
    assert fresh(interrupt).claim_renewed_at == stale
    assert claims.viewers([interrupt.pk]) == {}  # nor is a deactivated user shown as looking


def test_a_deactivated_holder_s_claim_asks_nobody_to_confirm():
    interrupt = pending()
    alice, bob = make.user(first_name="Alice"), make.user()
    claims.claim(interrupt, alice)
    type(alice).objects.filter(pk=alice.pk).update(is_active=False)
    assert claims.shown(fresh(interrupt)) is None  # nobody is reviewing it: Alice can no longer log in
    decisions.decide(interrupt, bob, "resolved", {"approved": True}, claim_confirmed=False)
    assert fresh(interrupt).status == "resolved"


def test_a_closed_card_s_claim_is_cleared_by_the_next_sweep_so_a_reopened_card_shows_none():
    # A card reopened (a refused answer sent back to people, a lapsed quorum) must not come
    # back saying the claim someone held before it closed.
    interrupt = pending()
    alice, bob = make.user(first_name="Alice"), make.user()
    claims.claim(interrupt, alice)
    decisions.decide(interrupt, bob, "resolved", {"approved": True}, claim_confirmed=True)
    claims.lapse_due()
    Interrupt.objects.filter(pk=interrupt.pk).update(status=Interrupt.Status.PENDING, closed_at=None)
    assert claims.shown(fresh(interrupt)) is None
    assert claims.CLAIM_LAPSED not in kinds(interrupt)
