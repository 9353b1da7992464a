"""Forms of the review pages. Agent-supplied JSON arrives as text and is parsed here."""

import json

from django import forms

from ..conf import ACTIONS, MAX_COMMENT_CHARS, MAX_CREDENTIAL_CHARS, MAX_JSON_CHARS, MAX_MESSAGE_CHARS
from ..models import DIALECT_CHOICES, Agent, Policy
from ..protocol import storable


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
    action = forms.ChoiceField(choices=[(a, a) for a in ACTIONS])
    payload = JSONTextField()
    edited_args = JSONTextField(expect=dict)
    comment = forms.CharField(required=False, max_length=MAX_COMMENT_CHARS, widget=forms.Textarea(attrs={"rows": 2}))
    # The standing answer the card showed (decisions.answer_digest): a plain approval joins only that one.
    seen = forms.CharField(required=False, max_length=64)
    # "A colleague is reviewing this; decide anyway" (claims.refuse_if_claimed).
    confirm_claim = forms.BooleanField(required=False)

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
        return cleaned


class StartRunForm(forms.Form):
    agent = forms.ModelChoiceField(queryset=Agent.objects.order_by("name"), to_field_name="name", required=False,
                                   empty_label=None)
    message = forms.CharField(max_length=MAX_MESSAGE_CHARS, required=False,
                              widget=forms.Textarea(attrs={"rows": 2, "placeholder": "Message to the agent"}))


class AgentForm(forms.ModelForm):
    # The stored credential is never sent back to the browser: the field starts
    # empty and an empty submission keeps the current value.
    auth_value = forms.CharField(
        required=False,
        max_length=MAX_CREDENTIAL_CHARS,
        widget=forms.PasswordInput(render_value=False),
        label="Credential",
        help_text="Sent to the agent in the header above. Leave empty to keep the current one.",
    )
    clear_auth_value = forms.BooleanField(required=False, label="Remove the stored credential")
    # Left out of a post (a script's, an older page's): the agent keeps the dialect it has.
    dialect = forms.ChoiceField(choices=DIALECT_CHOICES, required=False, help_text=Agent._meta.get_field(
        "dialect").help_text)

    class Meta:
        model = Agent
        fields = ["name", "url", "description", "dialect", "auth_header", "auth_value", "capabilities"]

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
        return cleaned

    @property
    def notices(self) -> list[str]:
        """What the page should tell the user after save() (the model may drop a stale credential)."""
        return [Agent.CREDENTIAL_DROPPED] if self.instance.credential_dropped else []


class PolicyForm(forms.ModelForm):
    """A policy as staff edit it on the Agents page; the model's constraints refuse a duplicate scope."""

    class Meta:
        model = Policy
        fields = ["name", "agent", "reason", "tool_name", "groups", "users", "required_approvals",
                  "allow_self_approval", "target_minutes", "backup_group"]
        widgets = {"groups": forms.CheckboxSelectMultiple, "users": forms.SelectMultiple(attrs={"size": 8})}
        labels = {"agent": "Agent (empty: every agent)", "tool_name": "Tool name"}
