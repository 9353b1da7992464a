"""The entries of changes to agents and policies: ``hub.agents`` and ``hub.policies`` append them in the change."""

from __future__ import annotations

from ...models import AuditEntry
from .chain import last_data, record
from .content import agent_content, grant_content, policy_content

# The agent fields whose change is worth an entry: where requests go and what they carry.
AGENT_TRACKED = ("url", "authHeader", "credentialSet", "credentialDigest", "signingSecretDigest")


def record_agent(agent, created: bool) -> AuditEntry | None:
    """An entry when ``agent`` is new or its URL, header, credential or signing secret changed; None otherwise."""
    subject, data = f"agent:{agent.pk}", agent_content(agent)
    if not created:
        last = last_data(subject)
        if last is not None and all(last.get(k) == data[k] for k in AGENT_TRACKED):
            return None
    return record("agent.created" if created else "agent.changed", data, subject=subject)


def record_agent_deleted(pk: int, name: str) -> AuditEntry:
    """An entry naming the agent that went."""
    return record("agent.deleted", {"agent": pk, "name": name}, subject=f"agent:{pk}")


def record_policy(policy, kind: str) -> AuditEntry | None:
    """An entry with every field of ``policy`` (``kind``: created or changed), unless nothing changed since the last."""
    subject, data = f"policy:{policy.pk}", policy_content(policy)
    if kind != "policy.created" and last_data(subject) == data:
        return None
    return record(kind, data, subject=subject)


def record_policy_deleted(pk: int, name: str) -> AuditEntry:
    """An entry naming the policy that went."""
    return record("policy.deleted", {"policy": pk, "name": name}, subject=f"policy:{pk}")


def record_grant(grant, kind: str) -> AuditEntry:
    """An entry with the whole of ``grant`` (``kind``: grant.created or grant.revoked)."""
    return record(kind, grant_content(grant), subject=f"grant:{grant.pk}")
