"""What existed before the trail held it, recorded by migrations 0011, 0014 and 0026 with historical models."""

from __future__ import annotations

import json

from django.conf import settings
from django.db import models

from .chain import CHUNK, CONTEXT, DECISION, EXPIRY, SUPERSEDED, record
from .content import (
    DECISION_ADDED,
    agent_content,
    decision_content,
    expiry_content,
    group_content,
    policy_content,
    superseded_content,
    user_content,
)


def backfill(apps) -> int:
    """Record what existed before the trail did (migration 0011): agents, policies, decisions, expiries.

    Works with the migration's historical models; returns how many entries
    it appended. Entries say when they were written, not when it happened.
    """
    model = apps.get_model
    entry = model("interrupts", "AuditEntry")
    made = 0
    for agent in model("interrupts", "Agent").objects.order_by("pk"):
        record("agent.created", agent_content(agent), subject=f"agent:{agent.pk}", model=entry)
        made += 1
    for policy in model("interrupts", "Policy").objects.select_related("agent").order_by("pk"):
        record("policy.created", policy_content(policy), subject=f"policy:{policy.pk}", model=entry)
        made += 1
    for decision in (model("interrupts", "Decision").objects.select_related("interrupt__run__thread", "user")
                     .order_by("pk").iterator(chunk_size=CHUNK)):
        record(DECISION, decision_content(decision), subject=f"decision:{decision.pk}",
               decision=decision, interrupt=decision.interrupt, model=entry)
        made += 1
        if decision.superseded_at:
            record(SUPERSEDED, superseded_content(decision), subject=f"decision:{decision.pk}",
                   decision=decision, interrupt=decision.interrupt, model=entry)
            made += 1
    for interrupt in (model("interrupts", "Interrupt").objects.filter(status="expired")
                      .select_related("run__thread").order_by("pk").iterator(chunk_size=CHUNK)):
        record(EXPIRY, expiry_content(interrupt), subject=f"interrupt:{interrupt.pk}", interrupt=interrupt, model=entry)
        made += 1
    return made


def backfill_access(apps) -> int:
    """Record who may decide as it stood before the trail held it (migration 0014): users, groups, policies.

    Every user and group without an entry gets one (``user.created``,
    ``group.created``), and every policy whose last entry names its agent,
    groups and users only by name gets a ``policy.changed`` with their ids,
    which verify holds it to from then on. Works with the migration's
    historical models; returns how many entries it appended.
    """
    model = apps.get_model
    entry = model("interrupts", "AuditEntry")
    permission = model("auth", "Permission")

    def last(subject: str) -> dict | None:
        found = entry.objects.filter(subject=subject).order_by("-seq").values_list("content", flat=True).first()
        return json.loads(found)["data"] if found else None

    with_types = permission.objects.select_related("content_type")
    made = 0
    for group in model("auth", "Group").objects.prefetch_related(
            models.Prefetch("permissions", queryset=with_types)).order_by("pk").iterator(chunk_size=CHUNK):
        if last(f"group:{group.pk}") is None:
            record("group.created", group_content(group), subject=f"group:{group.pk}", model=entry)
            made += 1
    for user in model(settings.AUTH_USER_MODEL).objects.prefetch_related(
            "groups", models.Prefetch("user_permissions", queryset=with_types)).order_by("pk").iterator(
            chunk_size=CHUNK):
        if last(f"user:{user.pk}") is None:
            record("user.created", user_content(user), subject=f"user:{user.pk}", model=entry)
            made += 1
    for policy in model("interrupts", "Policy").objects.select_related("agent").prefetch_related(
            "groups", "users").order_by("pk"):
        if set(last(f"policy:{policy.pk}") or ()) != set(content := policy_content(policy)):
            record("policy.changed", content, subject=f"policy:{policy.pk}", model=entry)
            made += 1
    return made


def backfill_context(apps) -> int:
    """Complete every decision entry written before it held what the reviewer read (0026); how many were appended.

    A ``decision.context`` entry holds the keys the entry lacks, as the rows stand
    at the upgrade: what was changed before it cannot be told.
    """
    model = apps.get_model
    entry = model("interrupts", "AuditEntry")
    completed = set(entry.objects.filter(kind=CONTEXT).values_list("decision_id", flat=True))
    made = after = 0
    while True:
        chunk = list(entry.objects.filter(kind=DECISION, seq__gt=after).order_by("seq")
                     .values_list("seq", "decision_id", "content")[:CHUNK])
        if not chunk:
            return made
        after = chunk[-1][0]
        lacking = {pk: json.loads(content)["data"] for _, pk, content in chunk if pk not in completed}
        lacking = {pk: data for pk, data in lacking.items() if any(k not in data for k in DECISION_ADDED)}
        for decision in (model("interrupts", "Decision").objects.filter(pk__in=lacking)
                         .select_related("interrupt__run__thread", "user").order_by("pk")):
            now = decision_content(decision)
            # Only what the models of the migration running this can say (0026's know no grant).
            missing = {k: now[k] for k in DECISION_ADDED if k not in lacking[decision.pk] and k in now}
            if not missing:
                continue
            data = {"decision": decision.pk, "threadId": now["threadId"], "interruptId": now["interruptId"],
                    **missing}
            record(CONTEXT, data, subject=f"decision:{decision.pk}", decision=decision,
                   interrupt=decision.interrupt, model=entry)
            completed.add(decision.pk)
            made += 1
