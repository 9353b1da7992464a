"""The eight rules of the AG-UI interrupt contract, as pure checks.

The spec ("Interrupts", contract rules 1-8) says what a resume must look like;
this module decides, for one thread as the hub knows it (``ThreadGate``),
whether an incoming ``RunAgentInput`` is new input, a resume, or a replay of a
resume already accepted, and refuses everything else with a
``ContractViolation`` whose ``code`` is stable and whose ``message`` names the
ids involved and what to do.

Nothing here reads a clock, a database or the network: the caller passes
``now`` and the thread's state, so every rule is testable in isolation and the
same checks serve the inbox, the REST API and the AG-UI gateway.

Two readings of the spec that matter in practice:

* A ``payload`` of ``None`` means "no payload". The AG-UI Python SDK omits
  ``None`` optionals on the wire, so an explicit JSON ``null`` and an absent
  payload cannot be told apart after a round trip; treating them alike keeps a
  forwarded resume meaning what it meant.
* The ``ag-ui`` metadata key is reserved for AG-UI itself, and this protocol
  version defines nothing under it. A resume entry using it is refused
  (``RESERVED_METADATA_KEY``): the hub composes and forwards answers, and must
  not let a client smuggle data into a namespace the agent's AG-UI layer may
  interpret. An *interrupt* using it is only flagged (``interrupt_problems``),
  never refused: the interrupt was already emitted by the agent, the hub
  carries interrupt metadata opaquely, and refusing to record it would only
  hide a pause from the reviewer.
"""

from .answers import (
    RESERVED_METADATA_KEY,
    RESERVED_REASON_PREFIX,
    check_entry,
    duplicate_ids,
    interrupt_problems,
    outcome_problems,
    parse_expiry,
)
from .gate import ThreadGate, Verdict, check_coverage, check_input, check_tool_answers, idempotency_key

__all__ = [
    "RESERVED_METADATA_KEY",
    "RESERVED_REASON_PREFIX",
    "ThreadGate",
    "Verdict",
    "check_coverage",
    "check_entry",
    "check_input",
    "check_tool_answers",
    "duplicate_ids",
    "idempotency_key",
    "interrupt_problems",
    "outcome_problems",
    "parse_expiry",
]
