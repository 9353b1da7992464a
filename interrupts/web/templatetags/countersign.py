"""Template filters for agent-supplied data: always escaped, readable, bounded."""

import functools
import json
import re

from django import template
from django.utils import timezone
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe
from django.utils.text import Truncator
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import JsonLexer

from ...conf import MAX_SHOWN_CHARS
from ...protocol import storable
from ...protocol.inert import answer_start as _answer_start
from ...protocol.inert import inert_schema as _inert_schema
from ...reads.history import request_label
from ...rules import looked, words
from .. import diffs

register = template.Library()

_formatter = HtmlFormatter(cssclass="highlight", nowrap=False)


def _pretty(value) -> str:
    if isinstance(value, str):
        decoded, value_ = storable.embedded(value)  # not JSON, or JSON that cannot be shown: as sent
        if not decoded:
            return value
        value = value_
    return json.dumps(value, indent=2, ensure_ascii=False, sort_keys=False)


@register.filter
def json_pretty(value) -> str:
    """Indented JSON text (escaped by the template like any string)."""
    text = _pretty(value)
    return text if len(text) <= MAX_SHOWN_CHARS else text[:MAX_SHOWN_CHARS] + "\n… (truncated)"


@register.filter
def json_highlight(value) -> str:
    """Syntax-highlighted JSON; Pygments escapes every token it emits."""
    text = json_pretty(value)
    return _reachable(highlight(text, JsonLexer(), _formatter), text.count("\n") + 1)


@register.filter
def json_tree(value, depth=0):
    """A collapsible tree (nested <details>) for state snapshots; leaves escaped."""
    if isinstance(value, dict) and value:
        rows = format_html_join("", "<li><span class=\"key\">{}</span>: {}</li>",
                                ((key, json_tree(item, depth + 1)) for key, item in list(value.items())[:500]))
        return format_html("<details{}><summary>{{…}} {} key{}</summary><ul class=\"tree\">{}</ul></details>",
                           mark_safe(" open") if depth < 1 else "", len(value), "" if len(value) == 1 else "s", rows)
    if isinstance(value, list) and value:
        rows = format_html_join("", "<li><span class=\"key\">{}</span>: {}</li>",
                                ((index, json_tree(item, depth + 1)) for index, item in enumerate(value[:500])))
        return format_html("<details{}><summary>[…] {} item{}</summary><ul class=\"tree\">{}</ul></details>",
                           mark_safe(" open") if depth < 1 else "", len(value), "" if len(value) == 1 else "s", rows)
    return format_html("<code class=\"leaf\">{}</code>", json.dumps(value, ensure_ascii=False)[:2000])


@register.simple_tag
def json_diff(before, after) -> str:
    """Word-level diff of two JSON values, one row per changed path (``web/diffs.py``; all text escaped)."""
    return diffs.render(before, after)


@register.filter
def json_data(value) -> str:
    """JSON text for a data-* attribute (escaped by the template like any string)."""
    return json.dumps(value, ensure_ascii=False, allow_nan=False)


@register.filter
def inert_schema(value):
    """The allow-listed part of a responseSchema that a browser form may see (None: no form).

    The stored schema stays as the agent sent it, for the audit and the
    server's validation; json-editor would turn parts of it into markup.
    """
    return _inert_schema(value)


@register.filter
def answer_start(interrupt):
    """What the card's answer form starts with, from what the agent gave (``inert.answer_start``), or None.

    An answer that approves (any reason but ``input_required``) starts from
    the tool call's proposed args and the metadata (the deployer's ``build``);
    a question for input starts empty, but for the schema's own defaults.
    """
    if interrupt.reason == "input_required":
        return None
    return _answer_start(_inert_schema(interrupt.response_schema), interrupt.proposed_args, interrupt.metadata)


def pygments_css() -> str:
    return _formatter.get_style_defs(".highlight")


# --- words for people: a reason, a moment, a long block a keyboard can reach (issue 15) -----------------

# A reason the agent namespaced ("countersign:deploy", "acme/refund") reads as its last part.
_REASON_SEPARATORS = re.compile(r"[:/]")
_REASON_WORD_BREAKS = re.compile(r"[_\-.\s]+|(?<=[a-z0-9])(?=[A-Z])")
REASON_WORDS_CHARS = 40  # the label; the reason whole is in its title and the filters
# Lines of a JSON block past which it scrolls in a box of its own (countersign.css: .highlight pre[tabindex]).
LONG_BLOCK_LINES = 16
BRIEF_JSON_CHARS = 160  # args this short read best on one line (json_brief)


@register.filter
def reason_words(reason) -> str:
    """An interrupt's reason as a label: "tool_call" → "Tool call", "countersign:deploy" → "Deploy".

    The agent's own word, only re-spaced and capitalised (escaped by the template
    like any string); the exact reason stays in the card's title and the filters.
    """
    return _reason_words(str(reason or ""))


@functools.lru_cache(maxsize=256)  # a page says a few reasons fifty times (rows and cards); each at most 200 chars
def _reason_words(reason: str) -> str:
    text = reason.strip()
    if not text:
        return "Request"
    last = [part for part in _REASON_SEPARATORS.split(text) if part.strip()]
    words = " ".join(_words(last[-1] if last else text)).lower()
    if not words:
        return text[:REASON_WORDS_CHARS]
    return Truncator(words[0].upper() + words[1:]).chars(REASON_WORDS_CHARS)


def _words(text: str) -> list[str]:
    """"due_date", "dueDate", "due-date" → ["due", "date"]: where people would put spaces."""
    return [word for word in _REASON_WORD_BREAKS.split(text) if word]


def _span(seconds: float) -> str:
    """A span as people say it, to the unit that matters: "4 min", "2 h", "1 h 20 min", "3 d"."""
    minutes = int(seconds // 60)
    if minutes < 60:
        return f"{max(minutes, 1)} min"
    hours, rest = divmod(minutes, 60)
    if hours < 3:
        return f"{hours} h {rest} min" if rest else f"{hours} h"
    if hours < 24:
        return f"{hours} h"
    return f"{hours // 24} d"


@register.filter
def ago(moment, now=None) -> str:
    """How long ago: "just now", "2 min ago", "3 h ago", "4 d ago" (never "0 minutes")."""
    if not moment:
        return ""
    seconds = ((now or timezone.now()) - moment).total_seconds()
    if seconds < 45:
        return "just now"
    return f"{_span(seconds)} ago"


@register.filter
def from_now(moment, now=None) -> str:
    """How long until: "in 5 min", "in 2 h", "in under a minute", "now" once it has passed."""
    if not moment:
        return ""
    seconds = (moment - (now or timezone.now())).total_seconds()
    if seconds <= 0:
        return "now"
    if seconds < 60:
        return "in under a minute"
    return f"in {_span(seconds)}"


@register.filter
def time_left(moment, now=None) -> str:
    """How long is left, for a one-line list: "5 min left", "under a minute left", "expired"."""
    if not moment:
        return ""
    seconds = (moment - (now or timezone.now())).total_seconds()
    if seconds <= 0:
        return "expired"
    return "under a minute left" if seconds < 60 else f"{_span(seconds)} left"


@register.filter
def shown_digest(interrupt) -> str:
    """The digest of what a card shows of ``interrupt`` (``rules.looked``): posted back with the decision."""
    return looked.shown_digest(interrupt)


@register.filter
def must_open(rule, interrupt) -> bool:
    """Whether the card's policy wants its long args opened before Approve (``rules.looked.must_open``)."""
    return rule is not None and looked.must_open(rule, interrupt)


@register.filter
def decider(decision) -> str:
    """Who took a decision, in words: a person, their standing grant, or a policy's rule they set."""
    return words.decider(decision)


@register.filter
def request_words(interrupt) -> str:
    """An interrupt in words for a one-line list: its message, else the call it would make."""
    return request_label(interrupt.message, interrupt.tool_name)


@register.filter
def json_brief(value) -> str:
    """json_highlight, on one (wrapping) line when the whole value is short: a card's args at a glance."""
    if isinstance(value, (dict, list)) and value:
        text = json.dumps(value, ensure_ascii=False)
        if len(text) <= BRIEF_JSON_CHARS:
            return mark_safe(highlight(text, JsonLexer(), _formatter))
    return json_highlight(value)


#: Args shown as labelled fields when they are an object of at most this many plainly named keys.
MAX_ARG_FIELDS = 20
_ARG_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_\-]{0,59}")


def field_words(name: str) -> str:
    """An argument's key as a label, as the edit form labels it (forms.js humanize): "dueDate" → "Due date",
    "imageURL" → "Image URL" (a word in capitals stays so)."""
    words = " ".join(w if len(w) > 1 and w.isupper() else w.lower() for w in _words(name))
    return words[:1].upper() + words[1:]


def _arg_value(value) -> SafeString:
    if isinstance(value, str):
        # Text as text: line breaks kept, wrapped, never a JSON string literal.
        return format_html('<dd class="arg-text">{}</dd>', value[:MAX_SHOWN_CHARS])
    if isinstance(value, bool):
        return format_html('<dd class="arg-plain">{}</dd>', "yes" if value else "no")
    if value is None:
        return mark_safe('<dd class="arg-plain muted">(none)</dd>')
    if isinstance(value, (int, float)):
        return format_html('<dd class="arg-plain">{}</dd>', json.dumps(value))
    return format_html('<dd class="arg-json">{}</dd>', json_brief(value))


@register.filter
def args_fields(value) -> SafeString:
    """A tool call's args for people: each key a label in words, text as text, the rest as short JSON.

    Anything else (not an object, too many keys, keys that are not names) stays JSON; the exact
    JSON is always one click away ("as JSON").
    """
    if not (isinstance(value, dict) and 0 < len(value) <= MAX_ARG_FIELDS
            and all(isinstance(k, str) and _ARG_NAME.fullmatch(k) for k in value)):
        return json_brief(value)
    rows = format_html_join("", '<div class="arg"><dt title="{}">{}</dt>{}</div>',
                            ((key, field_words(key), _arg_value(item)) for key, item in value.items()))
    return format_html('<dl class="args" data-testid="args">{}</dl><details class="as-json" data-looked-part="args">'
                       '<summary>as JSON</summary>{}</details>', rows, json_brief(value))


def _reachable(html: str, lines: int) -> SafeString:
    # A long block scrolls in its own box (max-height), and a box that scrolls must be reachable by
    # keyboard (axe: scrollable-region-focusable): tabindex and a name. Short blocks wrap and never
    # scroll, so they add no stop to the Tab order. Pygments' markup starts with its own <pre>, and
    # escapes every "<" of the content, so the first "<pre>" is the block's.
    if lines > LONG_BLOCK_LINES:
        html = html.replace("<pre>", '<pre tabindex="0" role="region" aria-label="JSON, scrolls">', 1)
    return mark_safe(html)
