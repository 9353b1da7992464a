"""Charts drawn on the server as SVG: readable at a glance, no script, nothing fetched from elsewhere.

Every text in a chart is escaped (``format_html``): agent names and reasons
are the agents' own words. No style attributes (the CSP refuses them):
colours and sizes come from classes in countersign.css. Each bar carries
a ``<title>`` (the browser's tooltip, and what a screen reader announces)
with its exact figure; each chart is also given as a table by the page.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe

# Geometry. Across, in percent of the chart's width: the SVG has no viewBox, so it is as wide as the page
# lets it be and its text keeps the page's size (a viewBox scaled 12 px text to 5 px on a phone). Down, in
# px. Each row's label sits on its own line above its bars, so a label never competes with a bar for width.
PLOT = 68.0  # the longest bar; the rest of the width is for the figure written after it
LABEL_CHARS = 60  # agent names and reasons, cut with an ellipsis (whole in the tooltip)
LABEL_LINE = 17
BAR_HEIGHT = 16
GROUP_GAP = 10
AXIS_HEIGHT = 40
TICKS = 5
# Steps an axis of durations is marked in (seconds): round times people read without arithmetic.
DURATION_STEPS = (1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400,
                  172800, 604800, 1209600, 2592000)


def duration_text(seconds: float | None) -> str:
    """A duration as people read it: "0.4 s", "42 s", "4 min 12 s", "2 h 5 min", "3 d 4 h"; "—" for none."""
    if seconds is None:
        return "—"
    if seconds < 10:  # cut, not rounded: 9.99 s is not yet "10.0 s"
        return f"{math.floor(seconds * 10) / 10:.1f} s"
    whole = int(seconds)
    for unit, size, smaller, smaller_size in (("d", 86400, "h", 3600), ("h", 3600, "min", 60), ("min", 60, "s", 1)):
        if whole >= size:
            big, rest = divmod(whole, size)
            small = rest // smaller_size
            return f"{big} {unit} {small} {smaller}" if small else f"{big} {unit}"
    return f"{whole} s"


def count_text(value: float | None) -> str:
    return "—" if value is None else f"{value:g}"


def _step(top: float, steps: Sequence[float] | None) -> float:
    """The smallest step that marks ``top`` in at most TICKS steps: from ``steps``, else 1, 2, 5 × 10ⁿ."""
    if top <= 0:
        return 1
    if steps:
        return next((s for s in steps if top / s <= TICKS), steps[-1] * math.ceil(top / steps[-1] / TICKS))
    magnitude = 10 ** math.floor(math.log10(top / TICKS)) if top >= TICKS else 1
    return next(m * magnitude for m in (1, 2, 5, 10) if top / (m * magnitude) <= TICKS)


def _cut(label: str) -> str:
    return label if len(label) <= LABEL_CHARS else label[: LABEL_CHARS - 1] + "…"


@dataclass(frozen=True)
class Row:
    """One group of bars: its label, a value per series (None: nothing to show), and what its tooltip adds.

    ``named`` is what the label's tooltip says instead of the label: a reason shown in words keeps the
    agent's exact word there ("Tool call (tool_call)"), as two spellings can read the same.
    """

    label: str
    values: tuple[float | None, ...]
    note: str = ""
    named: str = ""


def bars(title: str, rows: Sequence[Row], series: Sequence[str], *, axis: str,
         text: Callable[[float | None], str] = count_text, steps: Sequence[float] | None = None,
         chart_id: str, empty: str = "nothing in this period") -> SafeString:
    """A horizontal bar chart: a group of bars per row, one bar per series, on a marked axis named ``axis``."""
    if not rows:
        return format_html('<p class="chart-empty muted" id="{}">{}: {}.</p>', chart_id, title, empty)
    top = max((v for row in rows for v in row.values if v is not None), default=0)
    step = _step(top, steps)
    end = step * max(math.ceil(top / step), 1)
    group = LABEL_LINE + len(series) * BAR_HEIGHT + GROUP_GAP
    height = len(rows) * group + AXIS_HEIGHT

    def x(value: float) -> float:  # percent
        return PLOT * value / end

    parts = []
    for index, row in enumerate(rows):
        top_y = index * group
        parts.append(format_html('<text class="chart-label" x="0" y="{}">{}<title>{}</title></text>',
                                 top_y + LABEL_LINE - 4, _cut(row.label), row.named or row.label))
        for n, (name, value) in enumerate(zip(series, row.values, strict=False)):
            y = top_y + LABEL_LINE + n * BAR_HEIGHT
            tip = f"{row.named or row.label}, {name}: {text(value)}" + (f" ({row.note})" if row.note else "")
            width = 0 if value is None else max(x(value), 0.2)
            parts.append(format_html(
                '<g class="chart-bar series-{}"><rect x="0" y="{}" width="{}%" height="{}"/>'
                '<text class="chart-value" x="{}%" dx="4" y="{}">{}</text><title>{}</title></g>',
                n, y, f"{width:.2f}", BAR_HEIGHT - 3, f"{width:.2f}", y + BAR_HEIGHT - 5,
                f"{name} {text(value)}" if len(series) > 1 else text(value), tip))
    base = len(rows) * group
    ticks = [step * n for n in range(round(end / step) + 1)]
    parts.append(format_html('<line class="chart-axis" x1="0" y1="{0}" x2="{1}%" y2="{0}"/>', base, f"{PLOT:.2f}"))
    # The first figure starts at the axis' start rather than centred on it: half of it would be cut off.
    parts += [format_html('<line class="chart-tick" x1="{0}%" y1="0" x2="{0}%" y2="{1}"/>'
                          '<text class="chart-tick-label" x="{0}%" y="{2}" text-anchor="{3}">{4}</text>',
                          f"{x(t):.2f}", base, base + 15, "start" if n == 0 else "middle", text(t))
              for n, t in enumerate(ticks)]
    parts.append(format_html('<text class="chart-axis-label" x="{}%" y="{}" text-anchor="middle">{}</text>',
                             f"{PLOT / 2:.2f}", base + 33, axis))
    legend = format_html_join(" ", '<span class="chart-key series-{}">{}</span>', enumerate(series)) \
        if len(series) > 1 else ""
    return format_html(
        '<figure class="chart" id="{id}"><figcaption>{title} {legend}</figcaption>'
        '<svg class="chart-svg" width="100%" height="{h}" role="img" aria-labelledby="{id}-title">'
        '<title id="{id}-title">{title}</title>{parts}</svg></figure>',
        id=chart_id, title=title, legend=legend, h=height, parts=mark_safe("".join(parts)))


def stacked(title: str, parts: Sequence[tuple[str, int]], *, chart_id: str,
            labels: Mapping[str, str] | None = None) -> SafeString:
    """One bar split into ``parts`` (name, count), each as wide as its share, with a legend of counts and shares.

    ``labels`` says each name in words (the name stays the part's class).
    """
    said = labels or {}
    total = sum(n for _name, n in parts)
    if not total:
        return format_html('<p class="chart-empty muted" id="{}">{}: nothing closed in this period.</p>',
                           chart_id, title)
    height, at = 28, 0.0
    segments = []
    for name, n in parts:
        if not n:
            continue
        width = 100 * n / total  # percent, as bars' are
        segments.append(format_html(
            '<g class="chart-part outcome-{}"><rect x="{}%" y="1" width="{}%" height="{}"/>'
            '<title>{}: {} of {} ({})</title></g>',
            name, f"{at:.2f}", f"{width:.2f}", height, said.get(name, name), n, total, f"{n / total:.0%}"))
        at += width
    legend = format_html_join(" ", '<span class="chart-key outcome-{}">{} {} ({})</span>',
                              ((name, said.get(name, name), n, f"{n / total:.0%}") for name, n in parts))
    return format_html(
        '<figure class="chart" id="{id}"><figcaption>{title}</figcaption>'
        '<svg class="chart-svg chart-stacked" width="100%" height="{h}" role="img" aria-labelledby="{id}-title">'
        '<title id="{id}-title">{title}: {total} closed</title>{parts}</svg><p class="chart-legend">{legend}</p>'
        '</figure>',
        id=chart_id, title=title, h=height + 2, total=total, parts=mark_safe("".join(segments)),
        legend=legend)
