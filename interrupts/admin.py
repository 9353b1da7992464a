"""The operators' view of every model.

History is read-only here: events and decisions can be looked at, never added,
changed or deleted, and runs and interrupts only through the functions that
own their state changes, never by editing a row.
"""

import json

from django import forms
from django.contrib import admin, messages
from django.utils.html import format_html
from knox.models import AuthToken

from .hub import agents, events, policies, tokens
from .models import (
    Agent,
    APIToken,
    Decision,
    Delivery,
    DeliveryAttempt,
    EmailNotice,
    Event,
    Grant,
    Interrupt,
    NotificationPreference,
    Passkey,
    Policy,
    Run,
    Thread,
    Webhook,
    masked,
)
from .web.forms import AgentForm


def pretty_json(value) -> str:
    """Agent-supplied JSON, indented and escaped, for a read-only admin field."""
    if value is None:
        return "—"
    return format_html("<pre>{}</pre>", json.dumps(value, indent=2, ensure_ascii=False))


class ReadOnlyAdmin(admin.ModelAdmin):
    """An admin that shows rows and never writes them."""

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class AdminAgentForm(AgentForm):
    class Meta(AgentForm.Meta):
        fields = AgentForm.Meta.fields + ["builtin"]


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    form = AdminAgentForm
    list_display = ["name", "url", "dialect", "builtin", "credential", "created_at"]
    list_filter = ["builtin", "dialect"]
    search_fields = ["name", "url", "description"]
    actions = ["rotate_signing_secret"]

    @admin.display(description="Credential")
    def credential(self, obj):
        return obj.masked_auth_value or "—"

    def save_model(self, request, obj, form, change):
        agents.save(obj)
        if obj.credential_dropped:
            self.message_user(request, Agent.CREDENTIAL_DROPPED, messages.WARNING)
        if not change:
            self.show_secret(request, obj, obj.signing_secret)

    def show_secret(self, request, agent, secret):
        # The only time the secret is on a page: the message is shown once, then gone.
        self.message_user(request, f"Signing secret of {agent.name}: {secret} (give it to the agent; "
                                   "it is not shown again).", messages.WARNING)

    @admin.action(description="Rotate signing secret", permissions=["change"])
    def rotate_signing_secret(self, request, queryset):
        for agent in queryset:
            self.show_secret(request, agent, agents.rotate_signing_secret(agent))

    def delete_model(self, request, obj):
        agents.delete(obj)

    def delete_queryset(self, request, queryset):
        for agent in queryset:
            agents.delete(agent)


@admin.register(Policy)
class PolicyAdmin(admin.ModelAdmin):
    list_display = ["name", "agent", "reason", "tool_name", "required_approvals", "allow_self_approval",
                    "target_minutes", "backup_group"]
    list_filter = ["agent", "allow_self_approval"]
    search_fields = ["name", "reason", "tool_name"]
    filter_horizontal = ["groups", "users"]
    # Set on the Agents page or through the API, which check that whoever sets it may decide what it approves.
    readonly_fields = ["auto_approve", "auto_approve_args", "auto_approve_by"]

    def save_model(self, request, obj, form, change):
        # With its groups and users: one change, one audit entry (hub.policies).
        policies.save(obj, groups=form.cleaned_data.get("groups"), users=form.cleaned_data.get("users"))

    def save_related(self, request, form, formsets, change):
        # The members were saved with the policy: only inlines are left.
        for formset in formsets:
            self.save_formset(request, form, formset, change=change)

    def delete_model(self, request, obj):
        policies.delete(obj)

    def delete_queryset(self, request, queryset):
        for policy in queryset:
            policies.delete(policy)


@admin.register(Grant)
class GrantAdmin(ReadOnlyAdmin):
    # Made and revoked only through hub.grants (the Grants page, a card, the API): each with its entry.
    list_display = ["tool_name", "agent", "author", "created_at", "expires_at", "uses", "max_uses", "revoked_at"]
    list_filter = ["agent"]
    search_fields = ["tool_name", "why"]


@admin.register(Passkey)
class PasskeyAdmin(ReadOnlyAdmin):
    """Reviewers' passkeys: operators see them and remove a lost one; only its owner adds one (the Passkeys page)."""

    list_display = ["name", "user", "created_at", "last_used_at"]
    search_fields = ["name", "user__username"]

    def has_delete_permission(self, request, obj=None):
        return request.user.has_perm("interrupts.delete_passkey")


@admin.register(Thread)
class ThreadAdmin(admin.ModelAdmin):
    list_display = ["thread_id", "title", "agent", "last_seq", "updated_at"]
    list_filter = ["agent"]
    search_fields = ["thread_id", "title"]
    date_hierarchy = "created_at"
    readonly_fields = ["thread_id", "agent", "last_seq", "state_json", "messages_json", "created_at", "updated_at"]
    fields = ["thread_id", "title", "agent", "last_seq", "state_json", "messages_json", "created_at", "updated_at"]

    def has_add_permission(self, request):
        return False

    def has_delete_permission(self, request, obj=None):
        return False

    @admin.display(description="State")
    def state_json(self, obj):
        return pretty_json(obj.state)  # never behind its log: what changes it is written at once

    @admin.display(description="Messages")
    def messages_json(self, obj):
        return pretty_json(events.conversation_of(obj)[0])


class InterruptInline(admin.TabularInline):
    model = Interrupt
    fields = ["interrupt_id", "reason", "status", "tool_name", "expires_at"]
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Run)
class RunAdmin(ReadOnlyAdmin):
    list_display = ["run_id", "thread", "agent", "status", "parent", "created_at", "finished_at"]
    list_filter = ["status", "settlement", "agent"]
    search_fields = ["run_id", "thread__thread_id", "error_code", "error_message"]
    date_hierarchy = "created_at"
    list_select_related = ["thread", "agent", "parent"]
    inlines = [InterruptInline]
    readonly_fields = ["input_json", "outcome_json"]
    exclude = ["input", "outcome"]

    @admin.display(description="Input")
    def input_json(self, obj):
        return pretty_json(obj.input)

    @admin.display(description="Outcome")
    def outcome_json(self, obj):
        return pretty_json(obj.outcome)


@admin.register(Event)
class EventAdmin(ReadOnlyAdmin):
    list_display = ["thread", "seq", "type", "run", "from_agent", "received_at"]
    list_filter = ["type", "from_agent"]
    search_fields = ["thread__thread_id", "run__run_id", "type"]
    date_hierarchy = "received_at"
    list_select_related = ["thread", "run"]
    readonly_fields = ["payload_json"]
    exclude = ["payload"]

    @admin.display(description="Payload")
    def payload_json(self, obj):
        return pretty_json(obj.payload)


class DecisionInline(admin.TabularInline):
    model = Decision
    fields = ["status", "user", "created_at", "superseded_at"]
    readonly_fields = fields
    extra = 0
    can_delete = False

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Interrupt)
class InterruptAdmin(ReadOnlyAdmin):
    list_display = ["interrupt_id", "reason", "status", "run", "tool_name", "expires_at", "created_at"]
    list_filter = ["status", "reason", "run__agent"]
    search_fields = ["interrupt_id", "message", "tool_call_id", "tool_name", "run__run_id", "run__thread__thread_id"]
    date_hierarchy = "created_at"
    list_select_related = ["run"]
    inlines = [DecisionInline]
    readonly_fields = ["raw_json", "proposed_args_json", "problems"]
    exclude = ["raw", "proposed_args", "response_schema", "metadata"]

    @admin.display(description="As sent by the agent")
    def raw_json(self, obj):
        return pretty_json(obj.raw)

    @admin.display(description="Proposed args")
    def proposed_args_json(self, obj):
        return pretty_json(obj.proposed_args)


@admin.register(Decision)
class DecisionAdmin(ReadOnlyAdmin):
    list_display = ["interrupt", "status", "user", "created_at", "superseded_at"]
    list_filter = ["status", "interrupt__run__agent"]
    search_fields = ["interrupt__interrupt_id", "user__username", "comment"]
    date_hierarchy = "created_at"
    list_select_related = ["interrupt", "user"]
    readonly_fields = ["payload_json", "edited_args_json"]
    exclude = ["payload", "edited_args"]

    @admin.display(description="Payload")
    def payload_json(self, obj):
        return pretty_json(obj.payload)

    @admin.display(description="Edited args")
    def edited_args_json(self, obj):
        return pretty_json(obj.edited_args)


# API tokens by their first characters (the token itself is stored nowhere), in place of knox's admin.
admin.site.unregister(AuthToken)


class APITokenAddForm(forms.ModelForm):
    days = forms.FloatField(required=False, min_value=0,
                            help_text="How many days the token lasts. Empty: the site's default; 0: until revoked.")

    class Meta:
        model = APIToken
        fields = ["user"]

    def save(self, commit=True):
        self.instance, self.token = tokens.issue(self.cleaned_data["user"], days=self.cleaned_data["days"])
        self.save_m2m = lambda: None  # the admin calls it after save(commit=False); a token has no m2m
        return self.instance


@admin.register(APIToken)
class TokenAdmin(admin.ModelAdmin):
    list_display = ("__str__", "user", "created", "expiry")
    list_select_related = ("user",)
    search_fields = ("user__username",)
    readonly_fields = ("token_key", "user", "created", "expiry")

    def get_fields(self, request, obj=None):
        return ["user", "days"] if obj is None else list(self.readonly_fields)

    def get_readonly_fields(self, request, obj=None):
        return () if obj is None else self.readonly_fields

    def get_form(self, request, obj=None, **kwargs):
        if obj is None:
            kwargs["form"] = APITokenAddForm
        return super().get_form(request, obj, **kwargs)

    def save_model(self, request, obj, form, change):
        # The add form issued it (hub.tokens.issue); nothing about a token is edited afterwards.
        if not change:
            self.message_user(request, f"The new token for {obj.user}, shown this once (only its digest is "
                                       f"kept): {form.token}", messages.WARNING)

    def lookup_allowed(self, lookup, value, request=None):
        # The changelist filters on any field from the query string; none of a token's own is offered.
        if lookup.split("__")[0] in ("digest", "token_key", "pk"):
            return False
        return super().lookup_allowed(lookup, value, request)


# --- Notifications (hub/notify/) --------------------------------------------------------------


def _no_secret_lookups(lookup: str) -> bool:
    # ?secret__startswith=… on a changelist would be an oracle for the signing secret.
    return "secret" not in lookup.split("__")


@admin.register(Webhook)
class WebhookAdmin(admin.ModelAdmin):
    list_display = ("name", "url", "group", "policy", "active", "masked_secret")
    readonly_fields = ("masked_secret", "created_at")

    @admin.display(description="Signing secret")
    def masked_secret(self, obj):
        return masked(obj.secret)

    def lookup_allowed(self, lookup, value, request=None):
        return _no_secret_lookups(lookup) and super().lookup_allowed(lookup, value, request)


class DeliveryAttemptInline(admin.TabularInline):
    model = DeliveryAttempt
    extra = 0
    can_delete = False
    readonly_fields = ("number", "at", "response_status", "response_excerpt", "error", "resent_by")

    def has_add_permission(self, request, obj=None):
        return False


@admin.register(Delivery)
class DeliveryAdmin(ReadOnlyAdmin):
    """Deliveries as they went; re-sending is the Webhooks page's (or the API's), through ``notify.resend``."""

    list_display = ("key", "webhook", "event", "status", "attempts", "response_status", "created_at")
    list_filter = ("status", "event")
    inlines = [DeliveryAttemptInline]

    def lookup_allowed(self, lookup, value, request=None):
        return _no_secret_lookups(lookup) and super().lookup_allowed(lookup, value, request)


@admin.register(EmailNotice)
class EmailNoticeAdmin(ReadOnlyAdmin):
    list_display = ("key", "user", "event", "digest", "status", "attempts", "sent_at")
    list_filter = ("status", "digest", "event")


@admin.register(NotificationPreference)
class NotificationPreferenceAdmin(admin.ModelAdmin):
    list_display = ("user", "email")
