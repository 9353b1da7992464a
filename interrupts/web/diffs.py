"""Word-level diffs of two JSON values, one row per argument path, as escaped HTML.

Why it is shaped so: docs/internals/protocol.md (web/diffs.py).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from difflib import SequenceMatcher
from typing import Any

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

from ..conf import MAX_SHOWN_CHARS

__all__ = ["Row", "rows", "render"]

#: Rows (changed, added or removed paths) one diff shows; the rest are counted.
MAX_ROWS = 200
#: Word-list products past which the alignment (quadratic at worst) is skipped.
MAX_ALIGN = 250_000
#: An unchanged run longer than this many tokens shows only its two ends.
LONG_RUN = 40
KEEP = 12

# Words are what whitespace separates: "a@b.com," changes as one, not as five pieces.
_TOKENS = re.compile(r"\s+|\S+")
_MISSING = object()


@dataclass
class Row:
    """One path whose value differs: ``kind`` is changed, added or removed; ``parts`` are (op, text)."""

    path: str
    kind: str
    parts: list[tuple[str, str]] = field(default_factory=list)


def _pointer(parts: tuple) -> str:
    return "/".join(str(p).replace("~", "~0").replace("/", "~1") for p in parts)


def _leaves(value: Any, prefix: tuple = ()) -> dict[str, Any]:
    """Every leaf of *value* by its path, in document order (objects and arrays with members are not leaves)."""
    out: dict[str, Any] = {}
    stack = [(prefix, value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, dict) and item:
            stack.extend(reversed([(path + (key,), member) for key, member in item.items()]))
        elif isinstance(item, list) and item:
            stack.extend(reversed([(path + (index,), member) for index, member in enumerate(item)]))
        else:
            out[_pointer(path)] = item
    return out


def _text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _words(before: str, after: str) -> list[tuple[str, str]]:
    """(op, text) runs turning *before* into *after*: op is same, del or ins."""
    old, new = _TOKENS.findall(before), _TOKENS.findall(after)
    if len(old) * len(new) > MAX_ALIGN:
        return [("del", before[:MAX_SHOWN_CHARS]), ("ins", after[:MAX_SHOWN_CHARS])]
    runs: list[tuple[str, str]] = []
    for op, a1, a2, b1, b2 in SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if op == "equal":
            runs.append(("same", "".join(old[a1:a2])))
            continue
        if a2 > a1:
            runs.append(("del", "".join(old[a1:a2])))
        if b2 > b1:
            runs.append(("ins", "".join(new[b1:b2])))
    return _tidy(runs)


def _tidy(runs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Fold a space alone between two changes into them (``-a b- +c d+``, not ``-a- +c- -b- +d-``),
    join neighbouring runs of one kind (every del before every ins), and cut long unchanged runs."""
    folded: list[tuple[str, str]] = []
    for index, (op, text) in enumerate(runs):
        between = 0 < index < len(runs) - 1 and runs[index - 1][0] != "same" and runs[index + 1][0] != "same"
        if op == "same" and between and text.isspace():
            folded += [("del", text), ("ins", text)]
        else:
            folded.append((op, text))
    merged: list[tuple[str, str]] = []
    group: dict[str, str] = {}
    for op, text in folded + [("same", "")]:
        if op != "same":
            group[op] = group.get(op, "") + text
            continue
        merged += [(kind, group[kind]) for kind in ("del", "ins") if group.get(kind)]
        group = {}
        if text:
            merged.append((op, text))
    out = []
    for index, (op, text) in enumerate(merged):
        tokens = _TOKENS.findall(text) if op == "same" else []
        if len(tokens) > LONG_RUN:
            head = "".join(tokens[:KEEP]) if index else ""
            tail = "".join(tokens[-KEEP:]) if index < len(merged) - 1 else ""
            out += [part for part in (("same", head), ("gap", ""), ("same", tail)) if part[0] == "gap" or part[1]]
        else:
            out.append((op, text))
    return out


def rows(before: Any, after: Any) -> tuple[list[Row], list[str]]:
    """The paths whose values differ (as ``Row``), and the unchanged paths, in document order."""
    old, new = _leaves(before), _leaves(after)
    order = list(old) + [path for path in new if path not in old]
    changed, same = [], []
    for path in order:
        a, b = old.get(path, _MISSING), new.get(path, _MISSING)
        if a is not _MISSING and b is not _MISSING and type(a) is type(b) and a == b:
            same.append(path)
        elif b is _MISSING:
            changed.append(Row(path, "removed", [("del", _text(a) if not isinstance(a, str) else a)]))
        elif a is _MISSING:
            changed.append(Row(path, "added", [("ins", _text(b) if not isinstance(b, str) else b)]))
        elif isinstance(a, str) and isinstance(b, str):
            changed.append(Row(path, "changed", _words(a, b)))
        else:  # another type, or another number: shown as JSON, so "42" and 42 read apart
            changed.append(Row(path, "changed", [("del", _text(a)), ("ins", _text(b))]))
    return changed, same


_PART = {
    "same": "{}",
    "del": '<del><span class="sr">removed: </span>{}</del>',
    "ins": '<ins><span class="sr">added: </span>{}</ins>',
    "gap": '<span class="diff-gap" title="unchanged text left out">…</span>{}',
}
_KIND = {"changed": "changed", "added": "added", "removed": "removed"}


def _label(path: str) -> str:
    return path or "(the whole value)"


def render(before: Any, after: Any) -> SafeString:
    """The diff of *before* and *after* as escaped HTML (see the module docstring)."""
    changed, same = rows(before, after)
    shown = changed[:MAX_ROWS]
    body = format_html_join(
        "", '<div class="diff-row diff-{}"><dt><code>{}</code> <span class="diff-kind">{}</span></dt>'
            '<dd class="diff-text">{}</dd></div>',
        ((row.kind, _label(row.path), _KIND[row.kind],
          format_html_join("", "{}", ((format_html(_PART[op], text[:MAX_SHOWN_CHARS]),) for op, text in row.parts)))
         for row in shown))
    if not changed:
        summary = format_html("No changes: these are the proposed arguments{}.",
                              format_html(" ({})", ", ".join(same)[:500]) if same else "")
    else:
        counts = [f"{n} {kind}" for kind in ("changed", "added", "removed")
                  if (n := sum(row.kind == kind for row in changed))]
        summary = format_html("{}{}{}.", ", ".join(counts),
                              format_html("; unchanged: {}", ", ".join(same)[:500]) if same else "",
                              format_html(" ({} more not shown)", len(changed) - MAX_ROWS)
                              if len(changed) > MAX_ROWS else "")
    return format_html('<div class="diff" data-testid="word-diff"><p class="diff-summary">{}</p>{}</div>',
                       summary, format_html("<dl>{}</dl>", body) if shown else mark_safe(""))
