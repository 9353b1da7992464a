"""What each entry says: the content builders for decisions, expiries, agents, policies, users and groups."""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission
from django.db.models import Prefetch
from django.utils.crypto import salted_hmac

from ...protocol.signing import Unsignable, canonical
from ...protocol.subagents import SUBAGENT_EVENTS, attribute, read_subagent_event

# Keys decision_content gained after the first entries were written: an older entry
# without them is held to what it did record (the entry format is versioned by the
# keys it holds, which its hash fixes; every entry written now holds them all).
DECISION_ADDED = ("reason", "toolName", "rawDigest", "proposedArgsDigest", "requestedBy",
                  # What the reviewer read on the card besides those (since migration 0026).
                  "messageDigest", "responseSchemaDigest", "metadataDigest", "expiresAt", "subagent",
                  # The standing grant that took it (since migration 0028), or the policy's rule (0030).
                  "grant", "byPolicy",
                  # What the reviewer's page reported they had in view (since 0032).
                  "looked",
                  # The passkey assertion that countersigned it (since 0033).
                  "passkey")
#: The policy, as the trail last recorded it, under which the decision was taken: a reference
#: into the chain (``record_decision``), held to the chain rather than to any row.
POLICY_VERSION = "policyVersion"


def stamp(value: datetime | None) -> str | None:
    """One spelling of a time, whatever the database hands back."""
    return value.astimezone(UTC).isoformat(timespec="microseconds") if value else None


def username(user) -> str:
    # Historical models (the backfill in migration 0011) have no get_username().
    return user.get_username() if hasattr(user, "get_username") else user.username


def _fallback_json(value) -> bytes:
    # Total where RFC 8785 is not: lone surrogates escaped, any integer, NaN;
    # sorted keys, so a row's stand-in is the same whatever order jsonb keeps.
    return json.dumps(value, sort_keys=True, ensure_ascii=True, separators=(",", ":"), default=repr).encode()


def signable(value):
    """``value`` if RFC 8785 can canonicalise it; else ``{"unsignable": true, "sha256": <hex>}`` standing in for it."""
    try:
        canonical(value)
    except Unsignable:
        return {"unsignable": True, "sha256": hashlib.sha256(_fallback_json(value)).hexdigest()}
    return value


def _signable_fields(data: dict) -> dict:
    # The usual case costs one canonicalisation; otherwise each field stands alone.
    try:
        canonical(data)
    except Unsignable:
        return {key: signable(value) for key, value in data.items()}
    return data


def value_digest(value) -> str | None:
    """``sha256:`` + hex SHA-256 of ``value``'s canonical JSON (``unsignable:sha256:`` + a lossless spelling's)."""
    if value is None:
        return None
    try:
        return "sha256:" + hashlib.sha256(canonical(value)).hexdigest()
    except Unsignable:
        return "unsignable:sha256:" + hashlib.sha256(_fallback_json(value)).hexdigest()


def subagents(interrupts, events) -> dict[int, dict | None]:
    """The subagent the inbox names as having raised each interrupt (``protocol.subagents``), by pk."""
    names: dict = {}
    suspended: dict = {}
    for run_pk, kind, payload in events.filter(type__in=SUBAGENT_EVENTS).order_by("seq").values_list(
            "run_id", "type", "payload"):
        read_subagent_event(run_pk, kind, payload, names, suspended)
    found = {}
    for interrupt in interrupts:
        who = attribute(interrupt.run_id, interrupt.interrupt_id, interrupt.raw, names, suspended)
        found[interrupt.pk] = None if who is None else {"runId": signable(who[0]), "name": signable(who[1])}
    return found


def _subagent(interrupt) -> dict | None:
    # By the related manager, not the Event model: the backfill hands in historical instances.
    return subagents([interrupt], interrupt.run.events.all())[interrupt.pk]


def decision_content(decision, subagent=...) -> dict:
    """What a decision's entry records (docs/internals/trail.md, "Supersession"); never ``superseded_at``.

    ``subagent``: ``_subagent(interrupt)`` when the caller read it already (verify reads a chunk's at once).
    """
    interrupt = decision.interrupt
    run = interrupt.run
    return _signable_fields({
        "decision": decision.pk,
        "threadId": run.thread.thread_id,
        "runId": run.run_id,
        "interruptId": interrupt.interrupt_id,
        "toolCallId": interrupt.tool_call_id or None,
        "reason": interrupt.reason,
        "messageDigest": value_digest(interrupt.message),
        "toolName": interrupt.tool_name or None,
        "rawDigest": value_digest(interrupt.raw),
        "proposedArgsDigest": value_digest(interrupt.proposed_args),
        "responseSchemaDigest": value_digest(interrupt.response_schema),
        "metadataDigest": value_digest(interrupt.metadata),
        "expiresAt": stamp(interrupt.expires_at),
        "subagent": _subagent(interrupt) if subagent is ... else subagent,
        "requestedBy": run.requested_by_id,
        "user": {"id": decision.user_id, "username": signable(username(decision.user))},
        "action": decision.action,
        "status": decision.status,
        "payload": decision.payload,
        "editedArgs": decision.edited_args,
        "metadata": decision.metadata,
        "comment": decision.comment,
        "policy": decision.policy,
        "requiredApprovals": decision.required_approvals,
        **({"grant": decision.grant_id} if hasattr(decision, "grant_id") else {}),  # since 0028
        **({"byPolicy": decision.by_policy} if hasattr(decision, "by_policy") else {}),  # since 0030
        **({"looked": decision.looked} if hasattr(decision, "looked") else {}),  # since 0032
        **({"passkey": decision.passkey} if hasattr(decision, "passkey") else {}),  # since 0033
        "createdAt": stamp(decision.created_at),
    })


def superseded_content(decision) -> dict:
    """What a supersession entry records: which decision stopped counting, and when."""
    return _signable_fields({"decision": decision.pk, "interruptId": decision.interrupt.interrupt_id,
                             "supersededAt": stamp(decision.superseded_at)})


def expiry_content(interrupt) -> dict:
    """What an expiry entry records: the interrupt, when it was due, when and why it closed."""
    run = interrupt.run
    return _signable_fields({
        "interrupt": interrupt.pk,
        "threadId": run.thread.thread_id,
        "runId": run.run_id,
        "interruptId": interrupt.interrupt_id,
        "toolCallId": interrupt.tool_call_id or None,
        "status": interrupt.status,
        "expiresAt": stamp(interrupt.expires_at),
        "closedAt": stamp(interrupt.closed_at),
        "closedReason": interrupt.closed_reason,
    })


def _digest(secret: str, key: str | None = None) -> str | None:
    # Keyed (SECRET_KEY), not a bare SHA-256: a credential may be a guessable
    # password, and whoever holds an export must not be able to test guesses.
    # Short: it only has to show that the secret changed. Bytes with
    # surrogatepass: the same as UTF-8 for any encodable text, total otherwise.
    if not secret:
        return None
    mac = salted_hmac("countersign.trail", secret.encode("utf-8", "surrogatepass"), secret=key, algorithm="sha256")
    return "hmac-sha256:" + mac.hexdigest()[:16]


def digests(secret: str) -> set[str | None]:
    # What a recorded digest of ``secret`` may be: under SECRET_KEY or a key it replaced.
    return {_digest(secret, key) for key in [settings.SECRET_KEY, *settings.SECRET_KEY_FALLBACKS]}


def agent_content(agent) -> dict:
    """What an agent entry records: name, URL, header, and digests of its secrets, never the secrets."""
    return _signable_fields({
        "agent": agent.pk,
        "name": agent.name,
        "url": agent.url,
        "authHeader": agent.auth_header,
        "credentialSet": bool(agent.auth_value),
        "credentialDigest": _digest(agent.auth_value),
        "signingSecretDigest": _digest(agent.signing_secret),
    })


def policy_content(policy) -> dict:
    """What a policy entry records: every field; its agent, groups and users by id and as sorted names."""
    groups, users = list(policy.groups.all()), list(policy.users.all())
    restricted = {"restricted": policy.restricted} if hasattr(policy, "restricted") else {}  # since 0015
    backup = {"backupGroupId": policy.backup_group_id,  # since 0020
              "backupGroup": policy.backup_group.name if policy.backup_group_id else None,
              } if hasattr(policy, "backup_group_id") else {}
    asks = {"alwaysAsk": policy.always_ask} if hasattr(policy, "always_ask") else {}  # since 0028
    asks |= {"onExpiry": policy.on_expiry} if hasattr(policy, "on_expiry") else {}  # since 0029
    asks |= {"autoApprove": policy.auto_approve, "autoApproveArgs": policy.auto_approve_args,  # since 0030
             "autoApproveBy": policy.auto_approve_by_id} if hasattr(policy, "auto_approve") else {}
    asks |= {"requireLook": policy.require_look} if hasattr(policy, "require_look") else {}  # since 0032
    asks |= {"requirePasskey": policy.require_passkey} if hasattr(policy, "require_passkey") else {}  # since 0033
    return _signable_fields({
        **restricted,
        **asks,
        "policy": policy.pk,
        "name": policy.name,
        "agentId": policy.agent_id,
        "agent": policy.agent.name if policy.agent_id else None,
        "reason": policy.reason,
        "toolName": policy.tool_name,
        "groupIds": sorted(g.pk for g in groups),
        "groups": sorted(g.name for g in groups),
        "userIds": sorted(u.pk for u in users),
        "users": sorted(username(u) for u in users),
        "requiredApprovals": policy.required_approvals,
        "allowSelfApproval": policy.allow_self_approval,
        "targetMinutes": policy.target_minutes,
        **backup,
    })


def _permissions(permissions) -> list[str]:
    return sorted(f"{p.content_type.app_label}.{p.codename}" for p in permissions)


def user_content(user) -> dict:
    """What a user entry records: the flags and memberships that decide what they may do, never the password."""
    groups = list(user.groups.all())
    return _signable_fields({
        "user": user.pk,
        "username": username(user),
        "active": user.is_active,
        "staff": user.is_staff,
        "superuser": user.is_superuser,
        "groupIds": sorted(g.pk for g in groups),
        "groups": sorted(g.name for g in groups),
        "permissions": _permissions(user.user_permissions.all()),
    })


def group_content(group) -> dict:
    """What a group entry records: its name and permissions (``app_label.codename``, sorted)."""
    return _signable_fields({"group": group.pk, "name": group.name,
                             "permissions": _permissions(group.permissions.all())})


def user_rows():
    return get_user_model().objects.prefetch_related(
        "groups", Prefetch("user_permissions", queryset=Permission.objects.select_related("content_type")))


def group_rows():
    return Group.objects.prefetch_related(
        Prefetch("permissions", queryset=Permission.objects.select_related("content_type")))


def grant_content(grant) -> dict:
    """What a grant entry records: who made it and why, its scope, its bounds, and who revoked it when."""
    return _signable_fields({
        "grant": grant.pk,
        "author": {"id": grant.author_id, "username": signable(username(grant.author))},
        "agentId": grant.agent_id,
        "agent": grant.agent.name,
        "toolName": grant.tool_name,
        "argsSchema": grant.args_schema,
        "why": grant.why,
        "createdAt": stamp(grant.created_at),
        "expiresAt": stamp(grant.expires_at),
        "maxUses": grant.max_uses,
        "source": grant.source_id,
        "revokedAt": stamp(grant.revoked_at),
        "revokedBy": grant.revoked_by_id,
    })
