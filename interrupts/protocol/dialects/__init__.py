"""How each framework raises and takes interrupts, where it departs from the AG-UI contract.

The hub speaks the contract (interrupts.mdx): interrupts arrive in
RUN_FINISHED's ``outcome``, answers leave as ``RunAgentInput.resume``. A
*dialect* is the form an agent's framework gives that exchange, chosen when
the agent is registered (``Agent.dialect``); the hub asks it three things and
knows nothing else about any framework:

* ``terminal``: the run's end as Countersign reads it (a framework that
  raises interrupts some other way has them turned into an outcome here);
* ``notice``: what the run's end says about the registration (an ``agui``
  agent that used LangGraph's older event instead of an outcome);
* ``resume_input``: the resume's RunAgentInput as the framework takes it.

Some frameworks mark the interrupts themselves (TanStack AI's
``tanstack:interruptBinding``): their adapter applies whatever the agent's
dialect, through ``entry_metadata``, since the interrupt says who raised it.

Pure Python: nothing here touches Django or the network.
"""

from __future__ import annotations

from . import tanstack
from .agui import AGUI, LANGGRAPH_LEGACY, ON_INTERRUPT, Dialect, steering, without_steering
from .langgraph_legacy import LegacyLangGraph

__all__ = ["AGUI", "DIALECTS", "LANGGRAPH_LEGACY", "ON_INTERRUPT", "RESERVED_METADATA_KEYS", "Dialect", "LegacyLangGraph", "entry_metadata",
           "for_agent", "steering", "without_steering"]


#: Metadata keys of a resume entry that an adapter writes (``entry_metadata``): a
#: reviewer's or client's own would be sent signed as Countersign's, and
#: TanStack rebuilds its pending batch from the continuation alone.
RESERVED_METADATA_KEYS = frozenset({tanstack.CONTINUATION_KEY})


def entry_metadata(raw_interrupt: dict, status: str, payload: object) -> dict:
    """Metadata a framework needs on the resume entry that answers ``raw_interrupt`` ({} for plain AG-UI)."""
    return tanstack.entry_metadata(raw_interrupt, status, payload)


#: Every dialect by its registered name.
DIALECTS: dict[str, Dialect] = {AGUI: Dialect(), LANGGRAPH_LEGACY: LegacyLangGraph()}


def for_agent(name: str) -> Dialect:
    """The dialect registered under ``name``; an unknown name (an old row) is plain AG-UI."""
    return DIALECTS.get(name or AGUI, DIALECTS[AGUI])
