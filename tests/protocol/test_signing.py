"""protocol/signing.py: canonical JSON, fingerprints, and the Countersign-Signature header."""

import pytest

from interrupts.protocol import signing

SECRET = "css_secret"
BODY = b'{"threadId":"t","runId":"r","messages":[]}'
NOW = 1_767_225_600


def test_a_signature_verifies_and_returns_its_timestamp():
    assert signing.verify(SECRET, signing.sign(SECRET, BODY, NOW), BODY, NOW + 10) == NOW


@pytest.mark.parametrize("now, fragment", [(NOW + 301, "301 s"), (NOW - 301, "301 s")])
def test_a_stale_or_future_signature_is_refused(now, fragment):
    with pytest.raises(signing.SignatureError, match=fragment) as refused:
        signing.verify(SECRET, signing.sign(SECRET, BODY, NOW), BODY, now)
    assert refused.value.code == "BAD_SIGNATURE"
    # Within a tolerance of one's own, the same header passes.
    assert signing.verify(SECRET, signing.sign(SECRET, BODY, NOW), BODY, now, tolerance=400) == NOW


@pytest.mark.parametrize("header", [
    signing.sign("css_other", BODY, NOW),
    signing.sign(SECRET, BODY + b" ", NOW),
    signing.sign(SECRET, BODY, NOW).replace(f"t={NOW}", f"t={NOW + 1}"),  # the timestamp is inside the MAC
])
def test_a_forged_signature_is_refused(header):
    with pytest.raises(signing.SignatureError, match="does not match"):
        signing.verify(SECRET, header, BODY, NOW)


@pytest.mark.parametrize("header", [
    None, "", "v1=abc", f"t={NOW}", f"t=-{NOW},v1=abc", f"t={NOW}.5,v1=abc", "t=1234567890123,v1=abc",
    "garbage", "t=" + "9" * 2000,
    "t=\u00b2,v1=00", "t=\u0661\u0662,v1=00",  # digits to str.isdigit(), not to a timestamp
    f"t={NOW},t={NOW}," + signing.sign(SECRET, BODY, NOW).split(",")[1],  # two timestamps: which is signed?
])
def test_a_missing_or_malformed_header_is_refused(header):
    with pytest.raises(signing.SignatureError) as refused:
        signing.verify(SECRET, header, BODY, NOW)
    assert refused.value.code == "BAD_SIGNATURE"


def test_several_v1_signatures_pass_when_one_matches_as_during_a_rotation():
    good = signing.sign(SECRET, BODY, NOW).split(",")[1]
    assert signing.verify(SECRET, f"t={NOW},v1={'0' * 64},{good}", BODY, NOW) == NOW
    with pytest.raises(signing.SignatureError):
        signing.verify(SECRET, f"t={NOW},v1={'0' * 64},v1={'1' * 64}", BODY, NOW)


def test_canonical_is_rfc_8785():
    assert signing.canonical({"b": [1.0, "é"], "a": None}) == '{"a":null,"b":[1,"é"]}'.encode()


@pytest.mark.parametrize("value", [2**53, -(2**53), {"n": 10**20}, float("nan"), "\ud800"])
def test_values_rfc_8785_cannot_hold_are_unsignable(value):
    with pytest.raises(signing.Unsignable) as refused:
        signing.canonical(value)
    assert refused.value.code == "UNSIGNABLE_PAYLOAD"


def test_the_fingerprint_changes_with_every_field_it_binds():
    base = dict(thread_id="t", run_id="r", interrupt_id="i", tool_call_id=None, status="resolved", payload={"a": 1})
    first = signing.fingerprint(**base)
    assert first.startswith("sha256:") and len(first) == 7 + 64
    # An empty tool call id is no tool call.
    assert signing.fingerprint(**{**base, "tool_call_id": ""}) == first
    for field, other in [("thread_id", "t2"), ("run_id", "r2"), ("interrupt_id", "i2"), ("tool_call_id", "tc"),
                         ("status", "cancelled"), ("payload", {"a": 2})]:
        assert signing.fingerprint(**{**base, field: other}) != first, field
