"""STATE_DELTA against the thread's state: RFC 6902 as usual, with the work a patch can cause bounded."""

import json
import tracemalloc

import pytest

from interrupts.protocol.state import DeltaRefused, apply_delta, json_size

LIMIT = 64 * 1024


def test_the_usual_operations_apply_and_leave_the_original_alone():
    state = {"count": 1, "items": ["a"], "old": {"x": 1}}
    patched = apply_delta(state, [
        {"op": "replace", "path": "/count", "value": 2},
        {"op": "add", "path": "/items/-", "value": "b"},
        {"op": "copy", "from": "/items", "path": "/again"},
        {"op": "move", "from": "/old", "path": "/new"},
        {"op": "remove", "path": "/items/0"},
        {"op": "test", "path": "/count", "value": 2},
    ], max_bytes=LIMIT)
    assert patched == {"count": 2, "items": ["b"], "again": ["a", "b"], "new": {"x": 1}}
    assert state == {"count": 1, "items": ["a"], "old": {"x": 1}}


def test_a_doubling_copy_bomb_is_refused_before_it_is_built():
    # 738 bytes of these built 5.9 MB in 0.6 s with plain jsonpatch; 40 would take terabytes.
    bomb = [{"op": "copy", "from": "", "path": f"/k{n}"} for n in range(40)]
    state = {"a": list(range(10))}
    tracemalloc.start()
    try:
        with pytest.raises(DeltaRefused) as refused:
            apply_delta(state, bomb, max_bytes=LIMIT)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # Memory, not a clock: about 7 bytes held per byte of JSON, and one more copy doubles it.
    assert peak < 10 * LIMIT
    assert refused.value.code == "STATE_TOO_LARGE" and "not applied" in refused.value.message
    assert 5 <= refused.value.details["operation"] <= 15  # refused as soon as the next copy would not fit
    assert state == {"a": list(range(10))}


def test_adding_more_than_the_state_may_hold_is_refused():
    with pytest.raises(DeltaRefused) as refused:
        apply_delta({}, [{"op": "add", "path": "/big", "value": "x" * LIMIT}], max_bytes=LIMIT)
    assert refused.value.code == "STATE_TOO_LARGE"
    assert apply_delta({}, [{"op": "add", "path": "/big", "value": "x" * (LIMIT // 2)}], max_bytes=LIMIT)


@pytest.mark.parametrize("delta", [
    [{"op": "remove", "path": "/missing"}],
    [{"op": "test", "path": "/a", "value": 2}],
    [{"op": "teleport", "path": "/a"}],
    [{"op": "copy", "from": "/nowhere", "path": "/b"}],
    "not a list",
    [1, 2],
])
def test_a_delta_that_does_not_apply_is_refused_whole(delta):
    state = {"a": 1}
    with pytest.raises(DeltaRefused) as refused:
        apply_delta(state, [{"op": "add", "path": "/first", "value": 1}] + delta if isinstance(delta, list)
                    else delta, max_bytes=LIMIT)
    assert refused.value.code == "INVALID_DELTA"
    assert state == {"a": 1}


@pytest.mark.parametrize("value", [{"a": [1, "two", None, True, 2.5]}, [], "é", {"k" * 50: ["x" * 100] * 10}])
def test_json_size_is_close_to_the_json_text(value):
    exact = len(json.dumps(value, ensure_ascii=False, separators=(",", ":")))
    assert exact <= json_size(value) <= exact + 2 * len(json.dumps(value))


class _Unwalked:
    """Not JSON: counting it would raise, so a walk that reached one went past its limit."""


def test_json_size_stops_walking_at_its_limit():
    # The walk takes the last item first: only the numbers are within its reach.
    huge = [[_Unwalked()] * 1000 for _ in range(999)] + [list(range(1000))]
    assert json_size(huge, limit=100) > 100
    with pytest.raises(TypeError):
        json_size(huge)
