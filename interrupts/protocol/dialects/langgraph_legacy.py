"""ag-ui-langgraph's default form: a CUSTOM ``on_interrupt`` event per interrupt, no outcome.

(Filled in by the LangGraph legacy dialect work.)
"""

from __future__ import annotations

from .agui import LANGGRAPH_LEGACY, Dialect


class LegacyLangGraph(Dialect):
    name = LANGGRAPH_LEGACY
    label = "LangGraph on_interrupt (ag-ui-langgraph's default)"

    def notice(self, terminal, customs) -> str:
        return ""
