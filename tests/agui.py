"""Talk to AG-UI endpoints over real HTTP, checked by the official stream validator."""

import json
from dataclasses import dataclass

from ag_ui_validate import Report
from ag_ui_validate.transport import TransportOptions, validate_endpoint


@dataclass
class Streamed:
    events: list[dict]
    report: Report
    status: int | None

    @property
    def types(self) -> list[str]:
        return [e["type"] for e in self.events]

    @property
    def last(self) -> dict:
        return self.events[-1]

    @property
    def interrupts(self) -> list[dict]:
        outcome = self.last.get("outcome") or {}
        return outcome.get("interrupts", []) if outcome.get("type") == "interrupt" else []

    def snapshot(self, kind: str):
        """The last STATE_SNAPSHOT's state or MESSAGES_SNAPSHOT's messages."""
        key = {"STATE_SNAPSHOT": "snapshot", "MESSAGES_SNAPSHOT": "messages"}[kind]
        found = [e[key] for e in self.events if e["type"] == kind]
        return found[-1] if found else None

    def said(self) -> list[str]:
        return [e["delta"] for e in self.events if e["type"] == "TEXT_MESSAGE_CONTENT"]

    def problems(self, severities=("error", "warning", "info")) -> list[str]:
        """Validator findings of these severities (all, by default), plus its own failures."""
        return [
            f"{d.severity} {d.rule}: {d.message}" for d in self.report.diagnostics if d.severity in severities
        ] + list(self.report.internal_errors)


async def post_run(url: str, body: dict, headers: dict | None = None) -> Streamed:
    """POST a RunAgentInput and read the stream through ag-ui-validate, keeping every event."""
    events: list[dict] = []
    result = await validate_endpoint(
        url,
        TransportOptions(input=body, timeout_ms=20_000, headers=headers,
                         on_event=lambda raw, _: events.append(json.loads(raw))),
    )
    return Streamed(events=events, report=result.report, status=result.status)


def resume_body(first: Streamed, thread_id: str, run_id: str, resume: list[dict]) -> dict:
    """The next run's input as a client builds it: the paused run's snapshots plus the answers."""
    return {
        "threadId": thread_id,
        "runId": run_id,
        "parentRunId": first.events[0]["runId"],
        "messages": first.snapshot("MESSAGES_SNAPSHOT") or [],
        "state": first.snapshot("STATE_SNAPSHOT"),
        "resume": resume,
    }


def answers(entries: list[dict]) -> list[dict]:
    """Resume entries as the reviewers answered them: each entry's Countersign attestation checked and set aside.

    Every entry Countersign sends carries ``metadata.countersign`` (who
    decided, the policy, the fingerprint); tests that compare answers compare
    the rest, and this fails if an attestation is missing.
    """
    plain = []
    for entry in entries:
        entry = dict(entry)
        metadata = dict(entry.pop("metadata", None) or {})
        attested = metadata.pop("countersign", None)
        assert attested and attested["decisions"] and attested["fingerprint"].startswith("sha256:"), entry
        if metadata:
            entry["metadata"] = metadata
        plain.append(entry)
    return plain
