"""A duplicate key cannot make an agent store text the door never checked.

``RunStreamer._take`` checks ``json.loads(frame.data)`` for NUL and lone
surrogates (``storable.problem``), and pydantic validates the same decoded
view; both keep the *last* of two equal keys. ``events.append_many`` then stores
``frame.data`` itself (PostgreSQL ``json`` keeps it verbatim), so the first,
shadowed value (``\\u0000``, ``\\ud800``) is stored unchecked. On PostgreSQL
every ``->``/``->>`` on such a row, a ``::jsonb`` cast, and migration 0017's
reverse (``payload::jsonb``) then fail.
"""

import pytest
from django.db import connection

from interrupts.hub import events, streaming
from interrupts.models import Event, Run
from interrupts.protocol.sse import SSEFrame

from .. import factories as make

pytestmark = pytest.mark.django_db

SHADOWED = ["\\u0000", "\\ud800"]


def _streamer():
    run = make.run(status=Run.Status.STREAMING, claimed_by="w")
    run = Run.objects.select_related("thread", "agent").get(pk=run.pk)
    return run, streaming.RunStreamer(run, "w")


@pytest.mark.parametrize("escape", SHADOWED)
def test_a_shadowed_duplicate_key_cannot_smuggle_what_the_door_refuses(escape):
    run, streamer = _streamer()
    text = (f'{{"type":"RUN_STARTED","threadId":"{run.thread.thread_id}","runId":"{run.run_id}",'
            f'"x":"{escape}","x":"ok"}}')
    with pytest.raises(streaming.Fault) as refused:  # as "x":"\u0000" alone is refused
        streamer._take(SSEFrame(text))
    assert refused.value.code == "MALFORMED_EVENT"


def test_a_stored_event_stays_queryable():
    run, streamer = _streamer()
    text = (f'{{"type":"RUN_STARTED","threadId":"{run.thread.thread_id}","runId":"{run.run_id}",'
            '"x":"\\u0000","x":"ok"}')
    try:
        streamer._take(SSEFrame(text))
    except streaming.Fault:
        return  # refused at the door: nothing unqueryable is stored
    assert events.append_many(run, streamer.pending, "w")
    # What ExactJSONField's docstring promises: json "still answers -> and ->>" (the ORM's
    # payload__x="ok" fails on json for another reason: "operator does not exist: json = jsonb").
    with connection.cursor() as cursor:
        cursor.execute("SELECT payload ->> 'x' FROM interrupts_event WHERE run_id = %s", [run.pk])
        assert cursor.fetchone() == ("ok",)
    assert Event.objects.filter(run=run).count() == 1
