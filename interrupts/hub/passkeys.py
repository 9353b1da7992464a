"""Passkeys: registering a reviewer's WebAuthn credential, and countersigning one approval with it.

Where a policy requires a passkey, approving takes a fresh assertion whose
challenge is ``signing.passkey_challenge`` of the answer's fingerprint (the
one the signed resume carries) and the policy's version: the assertion signs
that exact approval, no other. The decision keeps it, its trail entry covers
it, and the resume's attestation carries it with the public key, so an agent
checks it too (``sdk.verify``). py_webauthn does the WebAuthn checks.
"""

from __future__ import annotations

import json

from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from django.contrib.auth import authenticate, update_session_auth_hash
from django.utils import timezone
from webauthn import (
    base64url_to_bytes,
    generate_authentication_options,
    generate_registration_options,
    options_to_json,
    verify_authentication_response,
    verify_registration_response,
)
from webauthn.helpers import bytes_to_base64url
from webauthn.helpers.exceptions import InvalidAuthenticationResponse, InvalidRegistrationResponse
from webauthn.helpers.structs import (
    AuthenticatorSelectionCriteria,
    PublicKeyCredentialDescriptor,
    ResidentKeyRequirement,
    UserVerificationRequirement,
)

from ..conf import MAX_PASSKEY_JSON_CHARS
from ..models import Interrupt, Passkey
from ..protocol import signing
from ..rules import eligibility
from . import policies, runs
from .refusals import Refusal
from .trail import chain

#: The session key holding a registration's challenge between its options and its answer.
REGISTERING = "countersign_passkey_registration"


def relying_party(request) -> tuple[str, str]:
    """The RP ID (the host's name) and origin a browser ceremony runs under: this request's, a host Django allowed."""
    host = request.get_host()
    return host.rsplit(":", 1)[0] if not host.endswith("]") else host, f"{request.scheme}://{host}"


def registration_options(request, password: str) -> str:
    """The options (JSON) to register a new passkey for the logged-in reviewer; the challenge kept in the session.

    Only with the account's password, checked as a login is (django-axes counts and locks out failures): a
    session alone, left open or stolen, must not add the passkey that then approves in its owner's name.
    """
    user = request.user
    again = authenticate(request, username=user.get_username(), password=password or "")
    if again is None or again.pk != user.pk:
        raise Refusal("PASSWORD_NEEDED", "Adding a passkey takes your password: type it again. After too many "
                                         "wrong ones your account is locked for a while, as at log in.", status=403)
    update_session_auth_hash(request, again)  # checking may have upgraded the hash: this session stays signed in
    rp_id, _ = relying_party(request)
    options = generate_registration_options(
        rp_id=rp_id, rp_name="Countersign", user_name=user.get_username(), user_id=str(user.pk).encode(),
        user_display_name=user.get_full_name() or user.get_username(),
        exclude_credentials=[PublicKeyCredentialDescriptor(id=base64url_to_bytes(p.credential_id))
                             for p in user.passkeys.all()],
        authenticator_selection=AuthenticatorSelectionCriteria(
            resident_key=ResidentKeyRequirement.DISCOURAGED, user_verification=UserVerificationRequirement.REQUIRED),
    )
    request.session[REGISTERING] = bytes_to_base64url(options.challenge)
    return options_to_json(options)


def register(request, credential: str, name: str) -> Passkey:
    """Keep the passkey ``credential`` (the browser's JSON) answers the session's registration challenge with."""
    challenge = request.session.pop(REGISTERING, None)
    if challenge is None:
        raise Refusal("PASSKEY_CEREMONY", "Start adding the passkey again: this page's request expired.", status=400)
    name = (name or "").strip()[:100] or "Passkey"
    rp_id, origin = relying_party(request)
    try:
        verified = verify_registration_response(
            credential=_bounded(credential), expected_challenge=base64url_to_bytes(challenge),
            expected_rp_id=rp_id, expected_origin=origin, require_user_verification=True)
    except (InvalidRegistrationResponse, ValueError, KeyError, TypeError) as problem:
        raise Refusal("PASSKEY_INVALID", f"The passkey could not be registered: {problem}", status=400) from None
    return Passkey.objects.create(
        user=request.user, name=name, credential_id=bytes_to_base64url(verified.credential_id),
        public_key=bytes_to_base64url(verified.credential_public_key), sign_count=verified.sign_count)


def refuse_unless_it_signs(evidence: dict, interrupt: Interrupt, status: str, payload) -> None:
    """PASSKEY_INVALID unless the checked ``evidence`` (``countersign``'s) signs exactly this answer, and no
    decision on ``interrupt``, undone or revised ones too, kept this very assertion.

    Its challenge is the answer's fingerprint, so a replay would check again; a synced passkey's sign count
    (always 0) does not tell one apart.
    """
    signed = runs.answer_fingerprint(interrupt, interrupt.run.thread.thread_id, status, payload)
    if evidence.get("fingerprint") != signed:
        raise Refusal("PASSKEY_INVALID", f"Your passkey signed another answer to interrupt {interrupt.interrupt_id} "
                                         "than the one your approval takes: look at it again, then approve.",
                      status=403, interrupt_id=interrupt.interrupt_id)
    signature = _signature(evidence)
    used = interrupt.decisions.filter(passkey__isnull=False).values_list("passkey", flat=True)
    if signature is None or any(_signature(kept) == signature for kept in used):
        raise Refusal("PASSKEY_INVALID", f"That passkey approval of interrupt {interrupt.interrupt_id} was used "
                                         "already: approve again, and your passkey signs anew.",
                      status=403, interrupt_id=interrupt.interrupt_id)


def _signature(evidence) -> bytes | None:
    """What makes an assertion's signature this one: decoded (base64url has other spellings of the same
    bytes), and of an ECDSA signature its r alone ((r, n - s) verifies too; r is the signing's fresh nonce)."""
    response = evidence.get("assertion", {}).get("response") if isinstance(evidence, dict) else None
    signature = response.get("signature") if isinstance(response, dict) else None
    try:
        raw = base64url_to_bytes(signature)
    except (TypeError, ValueError):
        return None
    try:
        r, _ = decode_dss_signature(raw)
    except ValueError:
        return raw or None  # not ECDSA (RSA, EdDSA): its bytes
    return b"ecdsa-r:" + r.to_bytes((r.bit_length() + 7) // 8 or 1, "big")


def challenge(interrupt: Interrupt, status: str, payload, rule: eligibility.Rule) -> tuple[bytes, dict]:
    """The challenge that countersigns this answer to ``interrupt`` under ``rule``, and what it binds."""
    fingerprint = runs.answer_fingerprint(interrupt, interrupt.run.thread.thread_id, status, payload)
    version = chain.policy_version(rule.name)
    return signing.passkey_challenge(fingerprint, version), {"fingerprint": fingerprint, "policyVersion": version}


def assertion_options(request, interrupt: Interrupt, status: str, payload, rule: eligibility.Rule) -> str:
    """The options (JSON) for the reviewer's passkey to sign this exact approval; only for who may decide it."""
    policies.refuse_unless_eligible(request.user, rule, interrupt)
    keys = list(request.user.passkeys.all())
    if not keys:
        raise Refusal("PASSKEY_NONE", "Approving this request takes your passkey, and you have none: add one "
                                      "under Passkeys first.", status=403)
    rp_id, _ = relying_party(request)
    signed, _ = challenge(interrupt, status, payload, rule)
    options = generate_authentication_options(
        rp_id=rp_id, challenge=signed, user_verification=UserVerificationRequirement.REQUIRED,
        allow_credentials=[PublicKeyCredentialDescriptor(id=base64url_to_bytes(k.credential_id)) for k in keys])
    return options_to_json(options)


def countersign(request, interrupt: Interrupt, status: str, payload, rule: eligibility.Rule, assertion: str) -> dict:
    """Check ``assertion`` (the browser's JSON) signs this answer with one of the reviewer's passkeys; the evidence
    the decision keeps, or PASSKEY_INVALID."""
    try:
        found = json.loads(_bounded(assertion))
        key = Passkey.objects.get(user=request.user, credential_id=found["id"])
    except (ValueError, KeyError, TypeError, Passkey.DoesNotExist):
        raise Refusal("PASSKEY_INVALID", "That passkey is not one of yours: approve again with your own.",
                      status=403) from None
    rp_id, origin = relying_party(request)
    signed, bound = challenge(interrupt, status, payload, rule)
    try:
        verified = verify_authentication_response(
            credential=found, expected_challenge=signed, expected_rp_id=rp_id, expected_origin=origin,
            credential_public_key=base64url_to_bytes(key.public_key), credential_current_sign_count=key.sign_count,
            require_user_verification=True)  # a touch alone is anyone holding the key: its PIN or biometric too
    except (InvalidAuthenticationResponse, ValueError, KeyError, TypeError) as problem:
        raise Refusal("PASSKEY_INVALID", f"The passkey did not sign this approval: {problem}. Approve again.",
                      status=403) from None
    Passkey.objects.filter(pk=key.pk).update(sign_count=verified.new_sign_count, last_used_at=timezone.now())
    return {**bound, "credentialId": key.credential_id, "publicKey": key.public_key, "rpId": rp_id,
            "origin": origin, "assertion": found}


def _bounded(text: str) -> str:
    if not isinstance(text, str) or len(text) > MAX_PASSKEY_JSON_CHARS:
        raise Refusal("TOO_LARGE", f"A passkey's answer holds at most {MAX_PASSKEY_JSON_CHARS:,} characters.",
                      status=400)
    return text
