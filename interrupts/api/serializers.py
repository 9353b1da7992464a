"""What the REST API shows and accepts. Wire data (payloads, args) stays camelCase JSON."""

import copy

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.core.exceptions import ValidationError as DjangoValidationError
from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from ..conf import (
    ACTIONS,
    BULK_ACTIONS,
    MAX_BULK_DECISIONS,
    MAX_COMMENT_CHARS,
    MAX_CREDENTIAL_CHARS,
    MAX_GRANT_HOURS,
    MAX_GRANT_USES,
    MAX_MESSAGE_CHARS,
    MAX_REQUIRED_APPROVALS,
    MAX_SIMULATION_DAYS,
    MAX_TITLE_CHARS,
    SIMULATION_DAYS,
)
from ..hub import agents, claims, decisions, events, policies
from ..models import Agent, Decision, Event, Grant, Interrupt, Policy, Run, Thread
from ..protocol.schema.edits import supports_edits
from ..reads import selectors
from ..rules import eligibility, targets


class AgentSerializer(serializers.ModelSerializer):
    # The credential goes in, and only its masked tail ever comes back out.
    auth_value = serializers.CharField(write_only=True, required=False, allow_blank=True,
                                       max_length=MAX_CREDENTIAL_CHARS)
    credential = serializers.CharField(source="masked_auth_value", read_only=True)
    notices = serializers.SerializerMethodField(
        help_text="What this change did that the caller did not ask for, e.g. CREDENTIAL_DROPPED.")

    class Notice(serializers.Serializer):
        code = serializers.CharField()
        detail = serializers.CharField()

    class Meta:
        model = Agent
        fields = ["id", "name", "url", "description", "dialect", "auth_header", "auth_value", "credential",
                  "capabilities", "builtin", "created_at", "notices"]
        read_only_fields = ["builtin", "created_at"]

    def validate(self, attrs):
        value = attrs.get("auth_value", getattr(self.instance, "auth_value", ""))
        header = attrs.get("auth_header", getattr(self.instance, "auth_header", ""))
        if value and not header:
            raise serializers.ValidationError({"auth_header": "Name the header that carries the credential."})
        return attrs

    def validate_url(self, value):
        # DRF leaves out a model URLField's URLValidators (it has its own, which takes ftp): run the model's.
        try:
            Agent._meta.get_field("url").run_validators(value)
        except DjangoValidationError as problem:
            raise serializers.ValidationError(problem.messages) from None
        return value

    def create(self, validated_data):
        return agents.save(Agent(**validated_data))

    def update(self, instance, validated_data):
        if validated_data.get("auth_value"):
            # Given in this very request: the model keeps it even when the URL moves.
            instance.credential_given = True
        for field, value in validated_data.items():
            setattr(instance, field, value)
        return agents.save(instance)

    @extend_schema_field(Notice(many=True))
    def get_notices(self, agent) -> list[dict]:
        if agent.credential_dropped:
            return [{"code": "CREDENTIAL_DROPPED", "detail": Agent.CREDENTIAL_DROPPED}]
        return []


class AgentCreatedSerializer(AgentSerializer):
    """An agent as its registration answers it: the one read that carries the signing secret."""

    signing_secret = serializers.CharField(
        read_only=True, help_text="The key of every Countersign-Signature sent to this agent. Shown once: keep it.")

    class Meta(AgentSerializer.Meta):
        fields = [*AgentSerializer.Meta.fields, "signing_secret"]


class SigningSecretSerializer(serializers.Serializer):
    signing_secret = serializers.CharField(read_only=True, help_text="The new secret. Shown once: keep it.")


class PolicySerializer(serializers.ModelSerializer):
    """A policy by names (agent, groups, users), so a script can write one without looking up ids."""

    agent = serializers.SlugRelatedField(slug_field="name", queryset=Agent.objects.all(), allow_null=True,
                                         required=False, help_text="The agent's name; null for every agent.")
    groups = serializers.SlugRelatedField(slug_field="name", queryset=Group.objects.all(), many=True, required=False)
    users = serializers.SlugRelatedField(slug_field="username", queryset=get_user_model().objects.all(),
                                         many=True, required=False)
    required_approvals = serializers.IntegerField(min_value=1, max_value=MAX_REQUIRED_APPROVALS, required=False)
    target_minutes = serializers.IntegerField(min_value=0, max_value=2**31 - 1, allow_null=True, required=False)
    auto_approve_by = serializers.SlugRelatedField(
        slug_field="username", read_only=True,
        help_text="Who turned auto_approve on or last changed its args: each approval it makes is in their name.")
    backup_group = serializers.SlugRelatedField(
        slug_field="name", queryset=Group.objects.all(), allow_null=True, required=False,
        help_text="The group that may also decide once target_minutes pass undecided, and is told; needs a target.")

    class Meta:
        model = Policy
        fields = ["name", "agent", "reason", "tool_name", "groups", "users", "required_approvals",
                  "allow_self_approval", "always_ask", "auto_approve", "auto_approve_args", "auto_approve_by",
                  "require_look", "require_passkey", "on_expiry", "target_minutes", "backup_group", "created_at",
                  "updated_at"]
        read_only_fields = ["created_at", "updated_at"]
        # The scope's uniqueness is checked in validate(), with a sentence; DRF's
        # generated validator does not understand conditional constraints.
        validators = []

    def validate(self, attrs):
        def current(field, default):  # a partial update keeps the stored scope
            if field in attrs:
                return attrs[field]
            return getattr(self.instance, field) if self.instance is not None else default

        scope = {"agent": current("agent", None), "reason": current("reason", ""),
                 "tool_name": current("tool_name", "")}
        clash = Policy.objects.filter(**scope)
        if self.instance is not None:
            clash = clash.exclude(pk=self.instance.pk)
        if (other := clash.first()) is not None:
            agent = scope["agent"].name if scope["agent"] else "every agent"
            raise serializers.ValidationError({"non_field_errors": [
                f"Policy {other.name!r} already applies to {agent} with reason {scope['reason']!r} and tool "
                f"{scope['tool_name']!r}: two policies for the same interrupts would leave the choice undefined."
            ]}, code="duplicate_scope")
        if current("backup_group", None) is not None and not current("target_minutes", None):
            raise serializers.ValidationError({"backup_group": [Policy.BACKUP_NEEDS_TARGET]})
        if current("on_expiry", Policy.OnExpiry.CANCEL) == Policy.OnExpiry.ESCALATE and \
                current("backup_group", None) is None:
            raise serializers.ValidationError({"on_expiry": [Policy.ESCALATE_NEEDS_BACKUP]})
        problem = Policy.auto_approve_problem(current("auto_approve", False), current("auto_approve_args", {}),
                                              current("always_ask", False) or current("require_passkey", False),
                                              current("required_approvals", 1))
        if problem is not None:
            raise serializers.ValidationError({problem[0]: [problem[1]]})
        return attrs

    def proposed(self) -> Policy:
        """The policy as validated, unsaved (for a simulation): the instance's copy with the changes."""
        proposed = copy.copy(self.instance) if self.instance is not None else Policy()
        for field, value in self.validated_data.items():
            if field not in ("groups", "users"):
                setattr(proposed, field, value)
        return proposed

    def create(self, validated_data):
        groups, users = validated_data.pop("groups", None), validated_data.pop("users", None)
        return policies.save(Policy(**validated_data), groups=groups, users=users, by=self.context["request"].user)

    def update(self, instance, validated_data):
        groups, users = validated_data.pop("groups", None), validated_data.pop("users", None)
        for field, value in validated_data.items():
            setattr(instance, field, value)
        return policies.save(instance, groups=groups, users=users, by=self.context["request"].user)


class UserSerializer(serializers.ModelSerializer):
    name = serializers.SerializerMethodField()

    class Meta:
        model = get_user_model()
        fields = ["username", "name"]

    def get_name(self, user) -> str:
        return user.get_full_name() or user.get_username()


class ThreadSerializer(serializers.ModelSerializer):
    agent = serializers.SlugRelatedField(slug_field="name", queryset=Agent.objects.all())
    pending = serializers.IntegerField(read_only=True, help_text="Interrupts waiting for a decision.")
    status = serializers.CharField(source="latest_status", read_only=True, allow_null=True,
                                   help_text="The status of the thread's latest run.")

    class Meta:
        model = Thread
        fields = ["id", "thread_id", "agent", "title", "status", "pending", "last_seq", "created_at", "updated_at"]
        read_only_fields = ["thread_id", "last_seq", "created_at", "updated_at"]


class ThreadDetailSerializer(ThreadSerializer):
    class Meta(ThreadSerializer.Meta):
        fields = ThreadSerializer.Meta.fields + ["state", "messages"]

    def to_representation(self, instance):
        shown = super().to_representation(instance)
        # While a run streams, the stored messages may lag its log by a moment: shown whole.
        shown["messages"] = events.conversation_of(instance)[0]
        return shown


class StartThreadSerializer(serializers.Serializer):
    agent = serializers.SlugRelatedField(slug_field="name", queryset=Agent.objects.all())
    message = serializers.CharField(required=False, allow_blank=True, max_length=MAX_MESSAGE_CHARS)
    title = serializers.CharField(required=False, allow_blank=True, max_length=MAX_TITLE_CHARS)
    forwarded_props = serializers.JSONField(required=False)


class StartRunSerializer(serializers.Serializer):
    message = serializers.CharField(required=False, allow_blank=True, max_length=MAX_MESSAGE_CHARS)
    forwarded_props = serializers.JSONField(required=False)


class RunSerializer(serializers.ModelSerializer):
    thread = serializers.SlugRelatedField(slug_field="thread_id", read_only=True)
    agent = serializers.SlugRelatedField(slug_field="name", read_only=True)
    parent = serializers.SlugRelatedField(slug_field="run_id", read_only=True)
    # Read by selectors.runs, with the run: no query per run serialized.
    resumed_by = serializers.CharField(source="resumed_by_run_id", read_only=True, allow_null=True,
                                       help_text="The run that sent this run's decisions back.")
    delivery = serializers.CharField(
        read_only=True,
        help_text="For a run queued again because its agent could not be reached: "
                  "'resume pending — agent unreachable, attempt N'; empty otherwise.",
    )
    refused = serializers.BooleanField(
        read_only=True, help_text="A resume that failed and that nobody has dealt with yet: POST resend/, "
                                  "reopen/ or close/ on it.")
    refusal = serializers.CharField(
        source="refusal_text", read_only=True,
        help_text="For a failed resume: 'The agent refused the answer: <code> <message>'; empty otherwise.")
    settled_by = serializers.SlugRelatedField(slug_field="username", read_only=True)
    status = serializers.CharField(
        source="shown_status", read_only=True,
        help_text="queued, streaming, interrupted, succeeded, failed, cancelled, or waiting_on_client: the run "
                  "ended leaving tool calls its client runs (pending_tool_calls), which the thread's next input "
                  "must answer (AG-UI 1.0 C21-C23); never 'succeeded' then.")
    waiting_on = serializers.CharField(
        source="waiting_on_client", read_only=True,
        help_text="'waiting on a tool the client runs: <names>' while pending_tool_calls is set; empty otherwise.")

    class Meta:
        model = Run
        fields = ["id", "run_id", "thread", "agent", "parent", "status", "waiting_on", "pending_tool_calls",
                  "origin", "input", "outcome", "error_code",
                  "error_message", "fault", "notice", "refused", "refusal", "settlement", "settled_by", "settled_at",
                  "resumed_by", "delivery", "attempts", "retry_at", "last_error", "created_at",
                  "started_at", "finished_at"]
        extra_kwargs = {
            "fault": {"help_text": "A stream fault found beside the agent's own error (its RUN_ERROR came before "
                                   "RUN_STARTED): 'CODE: message'. error_code stays the agent's."},
            "notice": {"help_text": "What Countersign noticed about how the run ended that the agent's "
                                    "registration should change (empty when nothing)."},
            "settlement": {"help_text": "What was done about a refused answer: resent, reopened or closed."},
            "pending_tool_calls": {"help_text": "The tool calls the run left for its client, [{id, name}] in the "
                                                "order made, derived from its events; null when none."},
            "attempts": {"help_text": "Tries that failed because the agent could not be reached."},
            "retry_at": {"help_text": "When the next try is due (queued runs waiting for their agent)."},
            "last_error": {"help_text": "Why the last try failed."},
        }


class EventSerializer(serializers.ModelSerializer):
    run = serializers.SlugRelatedField(slug_field="run_id", read_only=True)

    class Meta:
        model = Event
        fields = ["seq", "type", "run", "from_agent", "payload", "received_at"]


class EventPageSerializer(serializers.Serializer):
    thread = serializers.CharField(help_text="The threadId.")
    last_seq = serializers.IntegerField(help_text="The thread's latest sequence number.")
    next_after = serializers.IntegerField(help_text="Pass as ?after= to read the next page.")
    events = EventSerializer(many=True)


class DecisionSerializer(serializers.ModelSerializer):
    user = UserSerializer(read_only=True)
    interrupt = serializers.CharField(source="interrupt.interrupt_id", read_only=True)

    class Meta:
        model = Decision
        fields = ["id", "interrupt", "user", "status", "action", "payload", "edited_args", "metadata", "comment",
                  "policy", "required_approvals", "looked", "passkey", "created_at", "superseded_at"]


class InterruptSerializer(serializers.ModelSerializer):
    run = serializers.SlugRelatedField(slug_field="run_id", read_only=True)
    thread = serializers.CharField(source="run.thread.thread_id", read_only=True)
    agent = serializers.CharField(source="run.agent.name", read_only=True)
    supports_edits = serializers.SerializerMethodField(help_text="The responseSchema offers editedArgs.")
    policy = serializers.SerializerMethodField(help_text="The approval policy in force for this interrupt.")
    approvals = serializers.SerializerMethodField(
        help_text="Standing approvals so far (while pending, under a quorum), or the decisions that closed it.")
    can_decide = serializers.SerializerMethodField(
        help_text="Whether the requesting user may decide it now (eligible, and not their own request).")
    refusal = serializers.SerializerMethodField(
        help_text="Why the requesting user may not decide it (NOT_ELIGIBLE, SELF_APPROVAL), or null.")
    target = serializers.SerializerMethodField(
        help_text="The policy's target time for a pending interrupt, and whether it is on track, at risk or "
                  "breached; null when the policy sets none, or once decided.")
    subagent_run_id = serializers.SerializerMethodField(
        help_text="The subagent run that raised it, as the agent sent it (subagentRunId); null when the root "
                  "agent raised it. The agent's own text: attribution, not a link.")

    class Meta:
        model = Interrupt
        fields = ["id", "interrupt_id", "run", "subagent_run_id", "thread", "agent", "reason", "message", "status",
                  "tool_call_id", "tool_name", "proposed_args", "response_schema", "supports_edits", "expires_at",
                  "metadata", "problems", "closed_reason", "created_at", "closed_at", "policy", "approvals",
                  "can_decide", "refusal", "target", "claim", "escalated_at", "escalated_to"]

    @extend_schema_field({"type": "object", "nullable": True, "properties": {
        "due_at": {"type": "string", "format": "date-time"},
        "state": {"type": "string", "enum": ["on_track", "at_risk", "breached"]}}})
    def get_target(self, interrupt) -> dict | None:
        if interrupt.status != Interrupt.Status.PENDING:
            return None
        found = targets.target(interrupt, self._rule(interrupt), timezone.now())
        return {"due_at": found.due_at, "state": found.state} if found else None

    claim = serializers.SerializerMethodField(
        help_text="Who is reviewing it (a live claim: by, name, since, lapses_at), or null.")
    escalated_to = serializers.SlugRelatedField(
        slug_field="name", read_only=True, allow_null=True,
        help_text="The backup group it escalated to when its policy's target time passed, or null.")

    @extend_schema_field({"type": "object", "nullable": True, "properties": {
        "by": {"type": "string"}, "name": {"type": "string"},
        "since": {"type": "string", "format": "date-time"}, "lapses_at": {"type": "string", "format": "date-time"}}})
    def get_claim(self, interrupt) -> dict | None:
        found = claims.shown(interrupt)
        return found.as_json() if found else None

    def get_subagent_run_id(self, interrupt) -> str | None:
        return selectors.subagent_run_id(interrupt)

    def get_supports_edits(self, interrupt) -> bool:
        return supports_edits(interrupt.response_schema)

    def _rule(self, interrupt) -> eligibility.Rule:
        # Judged by the policies the view read once for the request (its context's "policies").
        rules = self.context.get("rules")
        if rules is None or interrupt.pk not in rules:
            page = getattr(self.parent, "instance", None)
            rules = self.context["rules"] = eligibility.rules_for(list(page) if page is not None else [interrupt],
                                                               self.context.get("policies"))
        return rules[interrupt.pk]

    @extend_schema_field({"type": "object", "properties": {
        "name": {"type": "string"}, "required_approvals": {"type": "integer"},
        "allow_self_approval": {"type": "boolean"}, "waiting_for": {"type": "string"}}})
    def get_policy(self, interrupt) -> dict:
        rule = self._rule(interrupt)
        return {"name": rule.name, "required_approvals": rule.required_approvals,
                "allow_self_approval": rule.allow_self_approval, "waiting_for": rule.waiting_for}

    def get_approvals(self, interrupt) -> int:
        return interrupt.standing  # annotated by selectors.interrupts

    def _refusal(self, interrupt):
        request = self.context.get("request")
        return policies.refusal(request.user, self._rule(interrupt), interrupt) if request else None

    def get_can_decide(self, interrupt) -> bool:
        return interrupt.status == Interrupt.Status.PENDING and self._refusal(interrupt) is None

    def get_refusal(self, interrupt) -> str | None:
        refused = self._refusal(interrupt)
        return refused.code if refused else None


class InterruptDetailSerializer(InterruptSerializer):
    decisions = DecisionSerializer(many=True, read_only=True)
    resumed_by = serializers.CharField(source="resumed_by_run_id", read_only=True, allow_null=True,
                                       help_text="The run that sent this interrupt's batch back to the agent.")
    standing_answer = serializers.SerializerMethodField(
        help_text="While pending: the answer a plain approval would join (send its digest as 'seen'), or null.")

    class Meta(InterruptSerializer.Meta):
        fields = InterruptSerializer.Meta.fields + ["raw", "decisions", "resumed_by", "standing_answer"]

    @extend_schema_field({"type": "object", "nullable": True, "properties": {
        "digest": {"type": "string"}, "status": {"type": "string"}, "payload": {},
        "edited_args": {"type": "object", "nullable": True}, "by": {"type": "string"}}})
    def get_standing_answer(self, interrupt) -> dict | None:
        if interrupt.status != Interrupt.Status.PENDING:
            return None
        standing = decisions.standing_answer(
            sorted((d for d in interrupt.decisions.all() if d.superseded_at is None), key=lambda d: d.pk))
        if standing is None:
            return None
        return {"digest": decisions.answer_digest(standing), "status": standing.status, "payload": standing.payload,
                "edited_args": standing.edited_args, "by": standing.user.get_username()}


class BulkDecideSerializer(serializers.Serializer):
    """One action on many interrupts: those named by ``ids``, or every pending one matching ``filter``."""

    action = serializers.ChoiceField(choices=list(BULK_ACTIONS))
    # Ids are 64-bit: a larger number is no interrupt, and the database refuses to compare with it.
    ids = serializers.ListField(child=serializers.IntegerField(min_value=1, max_value=2**63 - 1), required=False,
                                max_length=MAX_BULK_DECISIONS, help_text="The interrupts' ids.")
    filter = serializers.DictField(child=serializers.CharField(allow_blank=True, max_length=200), required=False,
                                   help_text="Inbox filters (agent, reason, thread, q, age, expiring, scope): "
                                             "every pending interrupt matching them, oldest first.")
    comment = serializers.CharField(required=False, allow_blank=True, max_length=MAX_COMMENT_CHARS)
    confirm_claim = serializers.BooleanField(
        required=False, default=False,
        help_text="Decide cards colleagues are reviewing too (else each is skipped with CLAIMED).")

    def validate(self, attrs):
        if ("ids" in attrs) == ("filter" in attrs):
            raise serializers.ValidationError("Give either 'ids' or 'filter'.")
        return attrs


class BulkSkippedSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    interrupt_id = serializers.CharField(allow_null=True)
    code = serializers.CharField()
    detail = serializers.CharField()


class BulkResultSerializer(serializers.Serializer):
    action = serializers.CharField()
    decided = DecisionSerializer(many=True)
    skipped = BulkSkippedSerializer(many=True)
    summary = serializers.CharField(help_text="'18 approved, 2 skipped: int-3 (ALREADY_DECIDED), …'")
    more = serializers.IntegerField(help_text=f"Interrupts matching the filter past the first {MAX_BULK_DECISIONS}, "
                                              "left for another request.")


class DecideSerializer(serializers.Serializer):
    """One answer. ``action`` picks the shape; ``payload`` is for ``respond``."""

    ACTIONS = list(ACTIONS)

    action = serializers.ChoiceField(choices=ACTIONS)
    payload = serializers.JSONField(required=False, help_text="The answer, for action 'respond'.")
    edited_args = serializers.JSONField(required=False, help_text="Full replacement of the tool args, for 'edit'.")
    metadata = serializers.JSONField(required=False, help_text="Envelope data about the answer (an object).")
    comment = serializers.CharField(required=False, allow_blank=True, max_length=MAX_COMMENT_CHARS)
    confirm_claim = serializers.BooleanField(
        required=False, default=False,
        help_text="Decide even though a colleague is reviewing it (else 409 CLAIMED naming them).")
    seen = serializers.CharField(
        required=False, allow_blank=True, max_length=64,
        help_text="The interrupt's standing_answer.digest as you read it: a plain 'approve' joins another "
                  "reviewer's standing answer (their edited args, their form answer) only when it is the one "
                  "you saw, else 409 ANSWER_CHANGED.")

    def validate(self, attrs):
        action = attrs["action"]
        if action == "respond" and "payload" not in attrs:
            raise serializers.ValidationError({"payload": "'respond' needs the payload to send."})
        if action == "edit" and not isinstance(attrs.get("edited_args"), dict):
            raise serializers.ValidationError({"edited_args": "'edit' needs the full edited args as an object."})
        if "metadata" in attrs and not isinstance(attrs["metadata"], dict):
            raise serializers.ValidationError({"metadata": "metadata is an object (or left out)."})
        return attrs


class ClaimSerializer(serializers.Serializer):
    take_over = serializers.BooleanField(
        required=False, default=False,
        help_text="Take the claim from the colleague holding it (else 409 CLAIMED naming them).")


class ClaimResultSerializer(serializers.Serializer):
    by = serializers.CharField()
    name = serializers.CharField()
    since = serializers.DateTimeField()
    lapses_at = serializers.DateTimeField()


class GrantSerializer(serializers.ModelSerializer):
    """A standing grant: who made it and why, what it covers, until when, and how much of it is used."""

    author = serializers.CharField(source="author.get_username", read_only=True)
    agent = serializers.CharField(source="agent.name", read_only=True)
    revoked_by = serializers.CharField(source="revoked_by.get_username", read_only=True, default=None)
    usable = serializers.SerializerMethodField()

    class Meta:
        model = Grant
        fields = ["id", "author", "agent", "tool_name", "args_schema", "why", "created_at", "expires_at", "max_uses",
                  "uses", "revoked_at", "revoked_by", "source", "usable"]
        read_only_fields = fields

    def get_usable(self, grant) -> bool:
        return grant.usable_at(timezone.now())


class NewGrantSerializer(serializers.Serializer):
    """What a grant is made of: the agent and tool it covers, the args it allows, why, and its bounds."""

    agent = serializers.SlugRelatedField(slug_field="name", queryset=Agent.objects.all())
    tool_name = serializers.CharField(max_length=200)
    args_schema = serializers.JSONField(required=False, help_text="A JSON Schema the call's args must fit; "
                                                                  "none (or {}) allows any args.")
    why = serializers.CharField(max_length=MAX_COMMENT_CHARS)
    hours = serializers.IntegerField(min_value=1, max_value=MAX_GRANT_HOURS)
    max_uses = serializers.IntegerField(min_value=1, max_value=MAX_GRANT_USES, required=False, allow_null=True)
    interrupt = serializers.PrimaryKeyRelatedField(queryset=Interrupt.objects.select_related("run"), required=False,
                                                   allow_null=True, help_text="The card it was made on, if any.")


class SimulatePolicySerializer(serializers.Serializer):
    """Which policy a simulation changes (none: a new one), and how many days of history to replay."""

    policy = serializers.SlugRelatedField(slug_field="name", queryset=Policy.objects.all(), required=False,
                                          help_text="An existing policy's name: the other fields change it.")
    days = serializers.IntegerField(min_value=1, max_value=MAX_SIMULATION_DAYS, default=SIMULATION_DAYS)


class SimulateGrantSerializer(serializers.Serializer):
    """A proposed grant's scope, and how many days of history to replay against it."""

    agent = serializers.SlugRelatedField(slug_field="name", queryset=Agent.objects.all())
    tool_name = serializers.CharField(max_length=200)
    args_schema = serializers.JSONField(required=False)
    days = serializers.IntegerField(min_value=1, max_value=MAX_SIMULATION_DAYS, default=SIMULATION_DAYS)
