"""What lets an agent check a countersignature: canonical JSON, fingerprints, HMAC signatures.

Why it is shaped so: docs/internals/protocol.md (protocol/signing.py).
"""

from __future__ import annotations

import hashlib
import hmac
import re
from typing import Any

import rfc8785

from .errors import ProtocolError

#: The header Countersign signs every request to an agent with.
SIGNATURE_HEADER = "Countersign-Signature"
#: The resume-entry metadata key only Countersign itself writes.
METADATA_KEY = "countersign"
#: How old a signature may be before an agent refuses it (seconds).
DEFAULT_TOLERANCE = 300
_UNIX_SECONDS = re.compile(r"[0-9]{1,12}")
#: Cap on the header an agent parses: a few signatures during a secret rotation, no more.
MAX_HEADER_CHARS = 1000


class SignatureError(ProtocolError):
    """A request whose Countersign-Signature is missing, malformed, forged or stale (``BAD_SIGNATURE``)."""

    def __init__(self, message: str) -> None:
        super().__init__("BAD_SIGNATURE", message)


class Unsignable(ProtocolError):
    """A value RFC 8785 cannot canonicalise (integers beyond ±2^53, NaN, lone surrogates)."""

    def __init__(self, message: str) -> None:
        super().__init__("UNSIGNABLE_PAYLOAD", message)


def canonical(value: Any) -> bytes:
    """The RFC 8785 canonical JSON bytes of ``value``; ``Unsignable`` if it has none."""
    try:
        return rfc8785.dumps(value)
    except (rfc8785.CanonicalizationError, TypeError, ValueError) as problem:
        raise Unsignable(
            f"This answer cannot be signed: {problem}. Integers beyond ±9007199254740991 "
            "must be sent as strings (RFC 8785)."
        ) from None


def fingerprint(*, thread_id: str, run_id: str, interrupt_id: str, tool_call_id: str | None,
                status: str, payload: Any) -> str:
    """``sha256:<hex>`` of the canonical JSON of one answer, bound to its thread, run and interrupt."""
    document = {
        "threadId": thread_id,
        "runId": run_id,
        "interruptId": interrupt_id,
        "toolCallId": tool_call_id or None,
        "status": status,
        "payload": payload,
    }
    return "sha256:" + hashlib.sha256(canonical(document)).hexdigest()


def passkey_challenge(fingerprint_: str, policy_version: Any) -> bytes:
    """The WebAuthn challenge that countersigns one approval: SHA-256 of the RFC 8785 JSON of its answer's
    ``fingerprint`` (thread, run, interrupt, tool call, status, payload) and the policy version it was taken under."""
    return hashlib.sha256(canonical({"fingerprint": fingerprint_, "policyVersion": policy_version})).digest()


def passkey_problem(passkey: Any, fingerprint_: str) -> str:
    """Why ``passkey`` (a decision's: its assertion, public key and relying party) does not countersign the
    answer of ``fingerprint_``, or "" when it does. py_webauthn checks the signature over the authenticator and
    client data, the challenge (``passkey_challenge``), the relying party, origin, user presence and verification."""
    from webauthn import base64url_to_bytes, verify_authentication_response  # only who checks passkeys needs it

    if not isinstance(passkey, dict) or passkey.get("fingerprint") != fingerprint_:
        return "it is missing, or signs another answer"
    try:
        verify_authentication_response(
            credential=passkey["assertion"],
            expected_challenge=passkey_challenge(fingerprint_, passkey.get("policyVersion")),
            expected_rp_id=passkey["rpId"], expected_origin=passkey["origin"],
            credential_public_key=base64url_to_bytes(passkey["publicKey"]), credential_current_sign_count=0,
            require_user_verification=True)
    except Exception as problem:  # py_webauthn's own errors, and a malformed block: all mean "not signed"
        return f"it does not verify: {problem}"
    return ""


def _mac(secret: str, timestamp: int, body: bytes) -> str:
    return hmac.new(secret.encode(), str(timestamp).encode() + b"." + body, hashlib.sha256).hexdigest()


def sign(secret: str, body: bytes, timestamp: int) -> str:
    """The ``Countersign-Signature`` header value for ``body`` sent at ``timestamp`` (unix seconds)."""
    return f"t={timestamp},v1={_mac(secret, timestamp, body)}"


def verify(secret: str, header: str | None, body: bytes, now: float,
           tolerance: float = DEFAULT_TOLERANCE) -> int:
    """Check ``header`` against ``body``; return its timestamp, or raise ``SignatureError``.

    Refused: no header, one that does not parse, a timestamp further than
    ``tolerance`` seconds from ``now`` (either way: a clock far ahead is as
    suspect as a replay), or no ``v1`` signature that matches. Exactly one
    ``t`` is accepted; several ``v1`` values are, so a sender may sign with
    an old and a new secret while a rotation rolls out. Compared in
    constant time.
    """
    if not header:
        raise SignatureError(f"The request carries no {SIGNATURE_HEADER} header.")
    if len(header) > MAX_HEADER_CHARS:
        raise SignatureError(f"The {SIGNATURE_HEADER} header is longer than {MAX_HEADER_CHARS} characters.")
    stamps, signatures = [], []
    for part in header.split(","):
        key, _, value = part.strip().partition("=")
        if key == "t":
            stamps.append(value)
        elif key == "v1":
            signatures.append(value)
    # Exactly one timestamp: with two, sender and receiver could disagree on which one is signed.
    # ASCII digits only: str.isdigit() also takes "²", which int() then refuses.
    timestamp = int(stamps[0]) if len(stamps) == 1 and _UNIX_SECONDS.fullmatch(stamps[0]) else None
    if timestamp is None or not signatures:
        raise SignatureError(f"The {SIGNATURE_HEADER} header is not 't=<unix seconds>,v1=<hex>'.")
    if abs(now - timestamp) > tolerance:
        raise SignatureError(
            f"The signature is {int(abs(now - timestamp))} s from this agent's clock; "
            f"at most {tolerance} s is accepted."
        )
    expected = _mac(secret, timestamp, body)
    if not any(hmac.compare_digest(expected, given) for given in signatures):
        raise SignatureError("The signature does not match the body and this agent's signing secret.")
    return timestamp
