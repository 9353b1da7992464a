"""docs/audit.md's signature and fingerprint vectors check, and its Python verifier agrees with ours."""

import re
from pathlib import Path

from interrupts.protocol import signing

AUDIT_DOC = (Path(__file__).resolve().parents[2] / "docs" / "audit.md").read_text()
SECTION = AUDIT_DOC.split("## Verifying Countersign's signature", 1)[1].split("\n## ", 1)[0]


def vector(block: int) -> dict:
    """docs/audit.md's ``key: value`` lines of one ```text block (a value may hold colons)."""
    text = re.findall(r"```text\n(.*?)```", SECTION, re.S)[block]
    return {key.strip(): value.strip() for key, _, value in (line.partition(":") for line in text.splitlines())}


def documented_verify():
    code = re.search(r"```python\n(.*?)```", SECTION, re.S).group(1)
    namespace: dict = {}
    exec(compile(code, "docs/audit.md", "exec"), namespace)
    return namespace["verify"]


def signature_vector() -> tuple[str, int, bytes, str]:
    v = vector(0)
    body = v["body"].encode()
    return v["secret"], int(v["timestamp"]), body, v["header"]


def test_the_documented_signature_vector_verifies():
    secret, timestamp, body, header = signature_vector()
    assert signing.sign(secret, body, timestamp) == header
    assert signing.verify(secret, header, body, timestamp + 5) == timestamp


def test_the_documented_verifier_agrees_with_ours():
    verify = documented_verify()
    secret, timestamp, body, header = signature_vector()
    assert verify(secret, header, body, now=timestamp + 5) is True
    cases = [
        (secret, header, body, timestamp + 301),  # stale
        (secret, header, body, timestamp - 301),  # from the future
        ("css_other", header, body, timestamp),  # another secret
        (secret, header, body + b" ", timestamp),  # another body
        (secret, None, body, timestamp),
        (secret, "v1=" + header.split("v1=")[1], body, timestamp),  # no timestamp
        (secret, f"t={timestamp},t={timestamp},{header.split(',')[1]}", body, timestamp),  # two timestamps
        (secret, "t=\u00b2,v1=00", body, timestamp),  # a digit to str.isdigit(), not to int()
    ]
    for case in cases:
        assert verify(*case[:3], now=case[3]) is False, case
    fresh = signing.sign(secret, body, 1_800_000_000)
    assert verify(secret, fresh, body, now=1_800_000_000) is True


def test_the_documented_fingerprint_vector_is_the_recipe():
    import json

    v = vector(1)
    document = v["document"]
    assert signing.canonical(json.loads(document)) == document.encode()
    data = json.loads(document)
    assert signing.fingerprint(thread_id=data["threadId"], run_id=data["runId"], interrupt_id=data["interruptId"],
                               tool_call_id=data["toolCallId"], status=data["status"],
                               payload=data["payload"]) == v["fingerprint"]
