"""Standing grants: made by an eligible reviewer, and revoked at once; ``automatic`` spends them.

A grant approves a call in its author's name, as one approval at most: never
under a policy that always asks, and only while its author may still decide.
"""

from __future__ import annotations

from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from ..conf import MAX_COMMENT_CHARS, MAX_GRANT_HOURS, MAX_GRANT_USES
from ..models import Agent, Grant, Interrupt
from ..protocol.errors import ProtocolError
from ..protocol.schema.payloads import payload_errors
from ..rules import eligibility
from .refusals import Refusal
from .trail import changes


def _scope_rule(agent: Agent, tool_name: str, source: Interrupt | None) -> eligibility.Rule:
    # The card's own rule when made from one; else the policy a call of the tool with no reason would meet.
    if source is not None:
        return eligibility.rule_for(source)
    return eligibility.rule_held(agent.pk, "", tool_name)


def check_scope(args_schema: dict | None) -> dict:
    """The args schema of a grant (none: any args), refused with GRANT_SCOPE when it cannot be used safely."""
    schema = args_schema if args_schema is not None else {}
    try:
        payload_errors(schema, {})  # checks the schema itself (size, patterns, metaschema), whatever the args
    except ProtocolError as problem:
        raise Refusal("GRANT_SCOPE", f"The grant's constraints on the args are not usable: {problem.message}",
                      status=400) from None
    return schema


def create(author, *, agent: Agent, tool_name: str, args_schema: dict | None, why: str, hours: int,
           max_uses: int | None = None, source: Interrupt | None = None) -> Grant:
    """A grant by ``author`` for ``agent``'s calls of ``tool_name`` whose args fit ``args_schema``, with its entry.

    Refused (400) when a bound or the scope is unusable, (403) when the author
    may not decide such calls or the policy always asks.
    """
    why = (why or "").strip()
    if not why:
        raise Refusal("GRANT_NEEDS_WHY", "Say why calls like this may be approved without asking.", status=400)
    if len(why) > MAX_COMMENT_CHARS:
        raise Refusal("TOO_LARGE", f"A grant's reason holds at most {MAX_COMMENT_CHARS:,} characters.", status=400)
    if not tool_name:
        raise Refusal("GRANT_NEEDS_TOOL", "A grant covers calls of one tool: name it.", status=400)
    if type(hours) is not int or not 1 <= hours <= MAX_GRANT_HOURS:
        raise Refusal("GRANT_HOURS", f"A grant lasts from 1 to {MAX_GRANT_HOURS} hours.", status=400)
    if max_uses is not None and (type(max_uses) is not int or not 1 <= max_uses <= MAX_GRANT_USES):
        raise Refusal("GRANT_USES", f"A grant approves from 1 to {MAX_GRANT_USES} calls, or any number "
                                    "until it ends.", status=400)
    schema = check_scope(args_schema)
    if source is not None and (source.run.agent_id != agent.pk or source.tool_name != tool_name):
        raise Refusal("GRANT_SCOPE", f"The card a grant is made on must be a call of {tool_name} by {agent.name}.",
                      status=400)
    rule = _scope_rule(agent, tool_name, source)
    if rule.asks_a_person:
        raise Refusal("ALWAYS_ASK", f"Policy {rule.name!r} asks a person for every call of {tool_name}"
                                    f"{' with their passkey' if rule.require_passkey else ''}: no grant may approve "
                                    "them.", status=403, policy=rule.name)
    if not rule.admits(author):
        raise Refusal("NOT_ELIGIBLE", f"You may not grant approvals of {tool_name}: policy {rule.name!r} "
                                      f"admits only {rule.waiting_for}.", status=403, policy=rule.name)
    now = timezone.now()
    with transaction.atomic(durable=True):
        grant = Grant.objects.create(author=author, agent=agent, tool_name=tool_name, args_schema=schema, why=why,
                                     expires_at=now + timedelta(hours=hours), max_uses=max_uses, source=source)
        changes.record_grant(grant, "grant.created")
    return grant


def scope_from(args, held) -> dict:
    """The args schema a card makes: each of ``held`` (names of ``args``' fields) kept to its value, the rest free,
    and no field the card did not show.

    Args that are not an object are held whole.
    """
    if not isinstance(args, dict):
        return {"const": args}
    kept = sorted({name for name in held if name in args})
    # The card's other fields are free; a field it did not show (a bcc, a force) is not.
    return {"type": "object", "properties": {name: {"const": args[name]} for name in kept}, "required": kept,
            "propertyNames": {"enum": sorted(args)}}


def may_revoke(user, grant: Grant, held=None) -> bool:
    """Its author, staff, or anyone who may decide the calls it covers (``held``: as ``rule_held`` takes it)."""
    return (user.is_authenticated and user.is_active
            and (user.pk == grant.author_id or user.is_staff
                 or eligibility.rule_held(grant.agent_id, "", grant.tool_name, held).admits(user)))


def revoke(grant: Grant, user) -> Grant:
    """Stop ``grant`` now, with its entry: the next call it would have covered asks a person."""
    if not may_revoke(user, grant):
        raise Refusal("NOT_ELIGIBLE", "Only the grant's author, staff, or someone who may decide the calls it "
                                      "covers can revoke it.", status=403)
    now = timezone.now()
    with transaction.atomic(durable=True):
        if not Grant.objects.filter(pk=grant.pk).revoke(user, now):
            raise Refusal("ALREADY_REVOKED", "This grant was already revoked.", status=409, grant=grant.pk)
        grant = Grant.objects.select_related("agent", "author").get(pk=grant.pk)
        changes.record_grant(grant, "grant.revoked")
    return grant
