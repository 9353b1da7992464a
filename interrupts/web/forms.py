"""Forms of the review pages. Agent-supplied JSON arrives as text and is parsed here."""

import json

from django import forms
from django.utils.text import Truncator

from ..conf import (
    ACTIONS,
    AGENT_BLURB_CHARS,
    GRANT_HOURS,
    MAX_COMMENT_CHARS,
    MAX_CREDENTIAL_CHARS,
    MAX_GRANT_USES,
    MAX_JSON_CHARS,
    MAX_MESSAGE_CHARS,
    MAX_PASSKEY_JSON_CHARS,
)
from ..models import DIALECT_CHOICES, Agent, Policy
from ..protocol import storable
from ..rules import looked as looked_rules


class JSONTextField(forms.CharField):
    """A field holding a JSON document typed (or generated) in the browser."""

    def __init__(self, *, expect=None, **kwargs):
        self.expect = expect
        kwargs.setdefault("required", False)
        kwargs.setdefault("max_length", MAX_JSON_CHARS)
        super().__init__(strip=True, **kwargs)

    def clean(self, value):
        text = super().clean(value)
        if not text:
            return None
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as problem:
            raise forms.ValidationError(f"This is not valid JSON: {problem}.") from None
        refused = storable.problem(data, "This answer")  # NUL, a lone surrogate, too deep: cannot be kept or sent
        if refused is not None:
            raise forms.ValidationError(refused.message)
        if self.expect is dict and not isinstance(data, dict):
            raise forms.ValidationError("This must be a JSON object, like {\"key\": \"value\"}.")
        return data


class DecideForm(forms.Form):
    # "grant": approve, and grant approvals of calls like this one (the card's "Approve and grant").
    action = forms.ChoiceField(choices=[(a, a) for a in (*ACTIONS, "grant")])
    payload = JSONTextField()
    edited_args = JSONTextField(expect=dict)
    comment = forms.CharField(required=False, max_length=MAX_COMMENT_CHARS, widget=forms.Textarea(attrs={"rows": 2}))
    # The standing answer the card showed (decisions.answer_digest): a plain approval joins only that one.
    seen = forms.CharField(required=False, max_length=64)
    # "A colleague is reviewing this; decide anyway" (claims.refuse_if_claimed).
    confirm_claim = forms.BooleanField(required=False)
    # What the card's script reported the reviewer had in view (rules.looked), checked against the card.
    looked = forms.CharField(required=False, max_length=looked_rules.MAX_LOOKED_CHARS, strip=False)
    # The passkey's assertion over this answer, where policy asks for one (hub.passkeys.countersign checks it).
    passkey = forms.CharField(required=False, max_length=MAX_PASSKEY_JSON_CHARS, strip=False)
    grant_hours = forms.TypedChoiceField(choices=GRANT_HOURS, coerce=int, required=False)
    grant_uses = forms.IntegerField(required=False, min_value=1, max_value=MAX_GRANT_USES)
    grant_why = forms.CharField(required=False, max_length=MAX_COMMENT_CHARS)

    def clean(self):
        cleaned = super().clean()
        action = cleaned.get("action")
        # One form on a card sends every action with the answer field beside it
        # (_card_actions.html): an answer half-typed is no reason to refuse a Cancel.
        for name, used_by in (("payload", "respond"), ("edited_args", "edit")):
            if action != used_by and name in self.errors:
                del self.errors[name]
                cleaned[name] = None
        if action == "respond" and "payload" in cleaned and cleaned["payload"] is None:
            self.add_error("payload", "Fill in the answer before sending it.")
        if action == "edit" and "edited_args" in cleaned and cleaned["edited_args"] is None:
            self.add_error("edited_args", "Give the full edited arguments as a JSON object.")
        if action == "grant" and not cleaned.get("grant_why", "").strip():
            self.add_error("grant_why", "Say why calls like this may be approved without asking.")
        if action == "grant" and not cleaned.get("grant_hours"):
            self.add_error("grant_hours", "Choose how long the grant lasts.")
        return cleaned


class AgentChoiceField(forms.ModelChoiceField):
    """Agents by name with what each does, so the menu says which one to pick."""

    def label_from_instance(self, agent) -> str:
        about = Truncator(agent.description.strip()).chars(AGENT_BLURB_CHARS)
        return f"{agent.name}: {about}" if about else agent.name


class StartRunForm(forms.Form):
    # No agent preselected: the first by name is not a choice the person made.
    agent = AgentChoiceField(queryset=Agent.objects.order_by("name"), to_field_name="name",
                             empty_label="Choose an agent…",
                             error_messages={"required": "Choose the agent to start a thread with.",
                                             "invalid_choice": "That agent is no longer registered: pick another."})
    # Required: an empty message started a thread the agent had nothing to act on, titled by its id.
    message = forms.CharField(max_length=MAX_MESSAGE_CHARS,
                              error_messages={"required": "Write a message for the agent.",
                                              "max_length": "Keep the message under %(limit_value)s characters."},
                              widget=forms.Textarea(attrs={"rows": 2, "placeholder": "Message to the agent"}))


# Capabilities an agent declares (AG-UI AgentCapabilities, reference/ag-ui/capabilities.mdx) that a person
# ticks rather than types: (category, its legend, ((key, what ticking it says), ...)). Everything else the
# agent declares stays JSON, in the form's "Other capabilities" field.
CAPABILITY_CHOICES = (
    ("humanInTheLoop", "People in the loop", (
        ("interrupts", "Raises interrupts for a person to answer"), ("approvals", "Asks for approvals"),
        ("approveWithEdits", "Takes edited arguments with an approval"),
        ("interventions", "Lets a person step in during a run"), ("feedback", "Takes feedback"))),
    ("tools", "Tools", (
        ("supported", "Calls tools"), ("parallelCalls", "Calls several tools at once"),
        ("clientProvided", "Uses tools the caller provides"))),
    ("state", "State", (
        ("snapshots", "Sends state snapshots"), ("deltas", "Sends state changes (deltas)"),
        ("persistentState", "Keeps state across runs"))),
    ("transport", "Transport", (
        ("streaming", "Streams its events"), ("resumable", "Resumes a dropped stream"))),
    # protocol.capabilities.dedupes_run_id: the outbox re-sends a resume whose answer was lost.
    ("custom", "Delivery", (
        ("dedupesRunId", "Acts on a run once: a run it already handled (same runId) is answered, not done again"),)),
)


def _ticked(capabilities, category: str, keys) -> list[str]:
    section = capabilities.get(category) if isinstance(capabilities, dict) else None
    return [key for key in keys if isinstance(section, dict) and section.get(key) is True]


def _capability_field(category: str) -> forms.MultipleChoiceField:
    legend, choices = next((legend, choices) for name, legend, choices in CAPABILITY_CHOICES if name == category)
    return forms.MultipleChoiceField(choices=choices, required=False, widget=forms.CheckboxSelectMultiple, label=legend)


class AgentForm(forms.ModelForm):
    # The stored credential is never sent back to the browser: the field starts
    # empty and an empty submission keeps the current value.
    auth_value = forms.CharField(
        required=False,
        max_length=MAX_CREDENTIAL_CHARS,
        widget=forms.PasswordInput(render_value=False),
        label="Credential",
        help_text="Sent to the agent in the header above, e.g. “Bearer sk-…”. Leave empty to keep the current one.",
    )
    clear_auth_value = forms.BooleanField(required=False, label="Remove the stored credential")
    # Left out of a post (a script's, an older page's): the agent keeps the dialect it has.
    dialect = forms.ChoiceField(choices=DIALECT_CHOICES, required=False, help_text=(
        "How the agent raises interrupts. Leave the default: it reads AG-UI's interrupt outcome and detects "
        "LangGraph's on_interrupt event from the runs themselves. Choose another only to force that reading."))
    # Ticked capabilities; the model keeps one JSON object (Agent.capabilities), as the API reads and writes it.
    cap_humanInTheLoop = _capability_field("humanInTheLoop")
    cap_tools = _capability_field("tools")
    cap_state = _capability_field("state")
    cap_transport = _capability_field("transport")
    cap_custom = _capability_field("custom")

    class Meta:
        model = Agent
        fields = ["name", "url", "description", "dialect", "auth_header", "auth_value", "capabilities"]
        labels = {"name": "Name", "url": "URL", "description": "Description", "auth_header": "Credential header",
                  "capabilities": "Other capabilities (JSON)"}
        help_texts = {
            "description": "What it does, in a line: the Agents page and the Threads page show it.",
            "auth_header": "The header that carries the credential, e.g. “Authorization”. Empty: none is sent.",
            "capabilities": "Anything else the agent declares (AG-UI AgentCapabilities) as a JSON object, e.g. "
                            "{\"identity\": {\"version\": \"1.2\"}}. The boxes above are kept apart from it.",
        }
        widgets = {"description": forms.Textarea(attrs={"rows": 2}),
                   "capabilities": forms.Textarea(attrs={"rows": 3, "spellcheck": "false"})}

    field_order = ["name", "url", "description", "dialect", "auth_header", "auth_value", "clear_auth_value",
                   *(f"cap_{category}" for category, _legend, _choices in CAPABILITY_CHOICES), "capabilities"]

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.label_suffix = ""  # "URL", not "URL:"
        if not self.instance.auth_value:
            # Nothing stored: nothing to offer to remove (hidden, not deleted: the admin lays out every field).
            self.fields["clear_auth_value"].widget = forms.HiddenInput()
        stored = self.instance.capabilities if isinstance(self.instance.capabilities, dict) else {}
        for category, _legend, choices in CAPABILITY_CHOICES:
            self.initial.setdefault(f"cap_{category}", _ticked(stored, category, [key for key, _ in choices]))
        if not self.is_bound:
            self.initial["capabilities"] = _unticked(stored)

    def clean_capabilities(self):
        value = self.cleaned_data.get("capabilities")
        if value in (None, ""):
            return {}
        if not isinstance(value, dict):
            raise forms.ValidationError(
                "Give a JSON object, like {\"identity\": {\"version\": \"1.2\"}}, or leave it empty.")
        return value

    def clean(self):
        cleaned = super().clean()
        if not cleaned.get("dialect"):
            cleaned["dialect"] = self.instance.dialect
        if cleaned.get("auth_value"):
            # Typed in this change: the model keeps it even if the URL moves.
            self.instance.credential_given = True
        elif self.instance.pk:
            cleaned["auth_value"] = "" if cleaned.get("clear_auth_value") else self.instance.auth_value
        if cleaned.get("auth_value") and not cleaned.get("auth_header"):
            self.add_error("auth_header", "Name the header that carries the credential.")
        if isinstance(cleaned.get("capabilities"), dict):
            # A ticked box declares the capability; an unticked one leaves what the JSON says (the page's
            # JSON never repeats the boxes, so unticking removes it; a script posting JSON alone keeps its own).
            merged = json.loads(json.dumps(cleaned["capabilities"]))
            for category, _legend, _choices in CAPABILITY_CHOICES:
                ticked = cleaned.get(f"cap_{category}") or []
                if ticked:
                    section = merged.get(category) if isinstance(merged.get(category), dict) else {}
                    merged[category] = {**section, **{key: True for key in ticked}}
            cleaned["capabilities"] = merged
        return cleaned

    @property
    def notices(self) -> list[str]:
        """What the page should tell the user after save() (the model may drop a stale credential)."""
        return [Agent.CREDENTIAL_DROPPED] if self.instance.credential_dropped else []


def _unticked(capabilities: dict) -> dict:
    """``capabilities`` without what the boxes show (a ticked key): the rest, for the JSON field."""
    rest = json.loads(json.dumps(capabilities))
    for category, _legend, choices in CAPABILITY_CHOICES:
        section = rest.get(category)
        if isinstance(section, dict):
            for key in _ticked(rest, category, [k for k, _ in choices]):
                del section[key]
            if not section:
                del rest[category]
    return rest


class PolicyForm(forms.ModelForm):
    """A policy as staff edit it on the Agents page; the model's constraints refuse a duplicate scope."""

    class Meta:
        model = Policy
        fields = ["name", "agent", "reason", "tool_name", "groups", "users", "required_approvals",
                  "allow_self_approval", "always_ask", "auto_approve", "auto_approve_args", "require_look",
                  "require_passkey", "target_minutes", "backup_group", "on_expiry"]
        widgets = {"groups": forms.CheckboxSelectMultiple, "users": forms.SelectMultiple(attrs={"size": 8}),
                   "auto_approve_args": forms.Textarea(attrs={"rows": 4, "spellcheck": "false"})}
        labels = {"name": "Name", "agent": "Agent", "reason": "Reason", "tool_name": "Tool", "groups": "Groups",
                  "users": "People", "required_approvals": "Approvals needed",
                  "allow_self_approval": "Self-approval allowed", "always_ask": "Always ask a person",
                  "auto_approve": "Approve automatically, in my name",
                  "auto_approve_args": "…only when the args match",
                  "require_look": "Long args must be opened before approving",
                  "require_passkey": "Approving takes the reviewer's passkey",
                  "on_expiry": "When a request expires unanswered",
                  "target_minutes": "Target time (minutes)", "backup_group": "Backup group"}
        help_texts = {"name": "How the Agents page and the API's URLs name it, so it holds no slash.",
                      "auto_approve": "Requests this policy governs are approved without asking anyone when "
                                      "their args match below; each approval is recorded as this policy's, "
                                      "in your name. Only for one approval, and never with Always ask.",
                      "auto_approve_args": "A JSON Schema over the call's args, for example "
                                           '{"properties": {"env": {"const": "staging"}}}; {} matches any.'}

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.label_suffix = ""  # "Agent", not "Agent:"
        # An empty choice says what it means, not "---------".
        self.fields["agent"].empty_label = "Every agent"
        self.fields["backup_group"].empty_label = "None"

    def clean_auto_approve_args(self):
        # Left empty: any args, as {} says.
        found = self.cleaned_data.get("auto_approve_args")
        return {} if found in (None, "") else found
