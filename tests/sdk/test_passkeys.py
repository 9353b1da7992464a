"""An SDK agent that asks for passkeys (``require_passkey``) runs only on approvals each countersigned by one.

The assertions come from a software authenticator made here with ``cryptography`` (an EC P-256 key, as a
platform authenticator holds one): the same bytes a browser's authenticator sends, checked by py_webauthn.
"""

import base64
import hashlib
import json

import cbor2
from ag_ui.core import RunAgentInput
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec

from interrupts.protocol import signing
from interrupts.sdk.verify import attested_approvals

from .test_verify import Shipper, entry, events_of, resume_input

RP, ORIGIN = "countersign.example", "https://countersign.example"
VERSION = {"policy": 3, "seq": 41, "hash": "sha256:" + "ab" * 32}


def b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


class Authenticator:
    def __init__(self) -> None:
        self.key = ec.generate_private_key(ec.SECP256R1())
        numbers = self.key.public_key().public_numbers()
        self.public = cbor2.dumps({1: 2, 3: -7, -1: 1, -2: numbers.x.to_bytes(32, "big"),
                                   -3: numbers.y.to_bytes(32, "big")})

    def countersign(self, fingerprint: str, version=VERSION, flags: int = 0x05) -> dict:
        """The passkey block Countersign attests: an assertion over ``passkey_challenge(fingerprint, version)``;
        ``flags``: the authenticator's (0x01 user present, 0x04 user verified)."""
        client = json.dumps({"type": "webauthn.get", "challenge": b64(signing.passkey_challenge(fingerprint, version)),
                             "origin": ORIGIN, "crossOrigin": False}).encode()
        data = hashlib.sha256(RP.encode()).digest() + bytes([flags]) + (1).to_bytes(4, "big")
        signature = self.key.sign(data + hashlib.sha256(client).digest(), ec.ECDSA(hashes.SHA256()))
        assertion = {"id": b64(b"credential-1"), "rawId": b64(b"credential-1"), "type": "public-key",
                     "response": {"authenticatorData": b64(data), "clientDataJSON": b64(client),
                                  "signature": b64(signature), "userHandle": None}, "clientExtensionResults": {}}
        return {"fingerprint": fingerprint, "policyVersion": version, "credentialId": b64(b"credential-1"),
                "publicKey": b64(self.public), "rpId": RP, "origin": ORIGIN, "assertion": assertion}


def fingerprint_of(payload=None) -> str:
    return signing.fingerprint(thread_id="t", run_id="r1", interrupt_id="ship", tool_call_id=None, status="resolved",
                               payload={"ok": True} if payload is None else payload)


def approved(passkey) -> dict:
    return entry(decisions=[{"username": "ann", "userId": 7, "action": "approve", "at": "2026-01-02T03:04:05Z",
                             **({"passkey": passkey} if passkey is not None else {})}])


async def test_an_agent_requiring_passkeys_runs_on_an_approval_its_passkey_signed():
    block = Authenticator().countersign(fingerprint_of())
    events = await events_of(Shipper(require_passkey=True), resume_input(approved(block)), attested=True)
    assert events[-1]["type"] == "RUN_FINISHED" and events[-1]["result"] == {"approvers": ["ann"]}
    [approval] = attested_approvals(RunAgentInput.model_validate(resume_input(approved(block))))["ship"]
    assert approval.passkey["credentialId"] == block["credentialId"]


async def test_an_approval_without_a_passkey_or_with_one_over_another_answer_never_reaches_the_agent():
    agent = Shipper(require_passkey=True)
    other = Authenticator().countersign(fingerprint_of({"ok": False}))
    older_policy = Authenticator().countersign(fingerprint_of(), version={**VERSION, "seq": 40})
    older_policy["policyVersion"] = VERSION  # claims the current policy version, signed over an older one
    touched_only = Authenticator().countersign(fingerprint_of(), flags=0x01)  # present, not verified (no PIN)
    for block in (None, other, older_policy, {**Authenticator().countersign(fingerprint_of()), "rpId": "evil.test"},
                  touched_only):
        events = await events_of(agent, resume_input(approved(block)), attested=True)
        assert (events[-1]["type"], events[-1]["code"]) == ("RUN_ERROR", "BAD_PASSKEY"), block
    assert agent.ran == 0
    # Without require_passkey the same answers run: the check is the agent's choice.
    assert (await events_of(Shipper(), resume_input(approved(None)), attested=True))[-1]["type"] == "RUN_FINISHED"


async def test_a_rejection_needs_no_passkey():
    rejected = entry(payload={"ok": False}, decisions=[{"username": "ann", "action": "reject"}])
    events = await events_of(Shipper(require_passkey=True), resume_input(rejected), attested=True)
    assert events[-1]["type"] == "RUN_FINISHED"
