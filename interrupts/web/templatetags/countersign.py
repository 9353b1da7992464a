"""Template filters for agent-supplied data: always escaped, readable, bounded."""

import difflib
import json

from django import template
from django.utils.html import format_html, format_html_join
from django.utils.safestring import mark_safe
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import JsonLexer

from ...conf import MAX_SHOWN_CHARS
from ...protocol import storable

from ...protocol.inert import inert_schema as _inert_schema

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
    return mark_safe(highlight(json_pretty(value), JsonLexer(), _formatter))


@register.filter
def json_tree(value, depth=0):
    """A collapsible tree (nested <details>) for state snapshots; leaves escaped."""
    if isinstance(value, dict) and value:
        rows = format_html_join("", "<li><span class=\"key\">{}</span>: {}</li>",
                                ((key, json_tree(item, depth + 1)) for key, item in list(value.items())[:500]))
        return format_html("<details{}><summary>{{…}} {} keys</summary><ul class=\"tree\">{}</ul></details>",
                           mark_safe(" open") if depth < 1 else "", len(value), rows)
    if isinstance(value, list) and value:
        rows = format_html_join("", "<li><span class=\"key\">{}</span>: {}</li>",
                                ((index, json_tree(item, depth + 1)) for index, item in enumerate(value[:500])))
        return format_html("<details{}><summary>[…] {} items</summary><ul class=\"tree\">{}</ul></details>",
                           mark_safe(" open") if depth < 1 else "", len(value), rows)
    return format_html("<code class=\"leaf\">{}</code>", json.dumps(value, ensure_ascii=False)[:2000])


@register.simple_tag
def json_diff(before, after) -> str:
    """Side-by-side diff of two JSON values (difflib escapes both sides)."""
    left, right = _pretty(before).splitlines(), _pretty(after).splitlines()
    table = difflib.HtmlDiff(wrapcolumn=60).make_table(left, right, "proposed", "edited", context=False)
    return mark_safe(table)


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


def pygments_css() -> str:
    return _formatter.get_style_defs(".highlight")
