"""The audit chain's hashing and its export file, in pure Python: the app writes both, anyone checks them offline.

An entry's hash is ``sha256:`` + SHA-256 over the previous entry's hash
(ASCII) then the entry's content (RFC 8785 JSON text, UTF-8); entry 1 follows
``GENESIS``. The export is one RFC 8785 canonical JSON document::

    {"entries": [{"content", "hash", "kind", "prevHash", "seq", "subject"}, ...],
     "format": "countersign-audit-export/1", "head": {"hash", "seq"}}

holding every entry from 1 to ``head``; a decision entry a passkey countersigned
is checked to be signed over its own answer, and a resume as sent (``resume.sent``:
its exact body and ``Countersign-Signature``) to carry only answers that decisions
or expiries before it took, and, given its agent's secret, to be signed. Being canonical, the file has one
spelling: ``check_export`` refuses any other, so a single changed byte either
breaks the JSON, changes a value the chain covers, or leaves a spelling that
is not canonical, and is found in every case.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from .signing import SignatureError, Unsignable, canonical, fingerprint, passkey_problem, verify

#: The prev_hash of entry 1: a chain starts from a fixed, published value.
GENESIS = "sha256:" + "0" * 64
EXPORT_FORMAT = "countersign-audit-export/1"
#: The response header every audit export carries: the chain's head as it began, ``SEQ:HASH``.
HEAD_HEADER = "Countersign-Audit-Head"
#: An export's entry keys, in their canonical order.
ENTRY_KEYS = ("content", "hash", "kind", "prevHash", "seq", "subject")
#: Problems an offline check lists before it only counts them.
MAX_LISTED = 20
#: The entry of a resume as it left: its agent, thread, run, exact body and signature (``hub.outbox``).
RESUME_SENT = "resume.sent"


def entry_hash(prev_hash: str, content: str) -> str:
    """The hash of an entry: ``sha256:`` + hex SHA-256 over ``prev_hash`` (ASCII) then ``content`` (UTF-8)."""
    return "sha256:" + hashlib.sha256(prev_hash.encode("ascii") + content.encode("utf-8")).hexdigest()


def export_chunks(head: dict, entries: Iterable[dict]) -> Iterator[bytes]:
    """The export document of ``entries`` (seq 1 to ``head["seq"]``, in order), a chunk per entry: streamable."""
    yield b'{"entries":['
    for n, entry in enumerate(entries):
        yield (b"," if n else b"") + canonical({k: entry[k] for k in ENTRY_KEYS})
    yield b'],"format":' + canonical(EXPORT_FORMAT) + b',"head":' + canonical(head) + b"}"


@dataclass
class Checked:
    """What ``check_export`` found: the entries that hold, the head, and the problems (none: it verifies)."""

    entries: int = 0
    head: dict | None = None
    problems: list[str] = field(default_factory=list)
    more: int = 0
    #: Resumes found, and how many of their signatures were checked (their agent's secret was given).
    resumes: int = 0
    signatures: int = 0
    #: Agents whose resumes' signatures were not checked: no secret was given for them.
    unchecked: set[str] = field(default_factory=set)
    #: Resumes whose answers are in their framework's own form (LangGraph's command), not ``resume``.
    unbound: int = 0

    @property
    def ok(self) -> bool:
        return not self.problems

    def add(self, problem: str) -> None:
        if len(self.problems) < MAX_LISTED:
            self.problems.append(problem)
        else:
            self.more += 1


def check_export(data: bytes, secrets: dict[str, list[str]] | None = None) -> Checked:
    """Check an export file's bytes: its spelling, every entry's hash and link, and that it ends at its head.

    ``secrets``: agent name → its signing secrets (every one it had: rotations), to check resumes' signatures.
    """
    result = Checked()
    answers = _Answers()
    try:
        document = _json(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as problem:
        result.add(f"the file is not JSON: {problem}")
        return result
    if not isinstance(document, dict) or set(document) != {"entries", "format", "head"}:
        result.add("the file is not a Countersign audit export (expected entries, format and head)")
        return result
    if document["format"] != EXPORT_FORMAT:
        result.add(f"the file's format is {document['format']!r}, not {EXPORT_FORMAT!r}")
        return result
    try:
        spelt = canonical(document) == data
    except (Unsignable, RecursionError):
        spelt = False
    if not spelt:
        result.add("the file is not spelt as Countersign writes it (RFC 8785): it was edited")
    head = document["head"]
    if not (isinstance(head, dict) and set(head) == {"hash", "seq"} and type(head["seq"]) is int):
        result.add("the head is not {seq, hash}")
        return result
    result.head = head
    entries = document["entries"]
    if not isinstance(entries, list):
        result.add("the entries are not a list")
        return result
    prev = GENESIS
    for n, entry in enumerate(entries, start=1):
        if not (isinstance(entry, dict) and set(entry) == set(ENTRY_KEYS)):
            result.add(f"entry {n} does not hold exactly {', '.join(ENTRY_KEYS)}")
            return result
        problem = _entry_problem(n, entry, prev, answers, secrets or {}, result)
        if problem:
            result.add(problem)
        else:
            result.entries = n
        prev = entry["hash"]
    last = (len(entries), entries[-1]["hash"]) if entries else (0, GENESIS)
    if (head["seq"], head["hash"]) != last:
        result.add(f"the file ends at entry {last[0]} ({last[1]}), not at its head {head['seq']}:{head['hash']}: "
                   "entries were cut or added")
    return result


def _json(text: str | bytes):
    """``json.loads``, with nesting too deep for Python's parser refused as a ValueError like any bad JSON."""
    try:
        return json.loads(text)
    except RecursionError:
        raise ValueError("it is nested too deeply") from None


def _entry_problem(n: int, entry: dict, prev: str, answers: _Answers, secrets: dict[str, list[str]],
                   result: Checked) -> str:
    if entry["seq"] != n:
        return f"entry {n} is numbered {entry['seq']!r}: an entry was removed, added or moved"
    if entry["prevHash"] != prev:
        return f"entry {n} does not follow the one before it (prevHash {entry['prevHash']!r})"
    if not isinstance(entry["content"], str) or entry_hash(prev, entry["content"]) != entry["hash"]:
        return f"entry {n}'s content does not hash to {entry['hash']!r}: it was changed"
    try:
        content = _json(entry["content"])
    except ValueError:
        return f"entry {n}'s content is not JSON"
    if not isinstance(content, dict) or (content.get("seq"), content.get("kind"), content.get("subject")) != (
            n, entry["kind"], entry["subject"]):
        return f"entry {n}'s number, kind or subject differ from its hashed content"
    return _content_problem(n, content, answers, secrets, result)


def _content_problem(n: int, content: dict, answers: _Answers, secrets: dict[str, list[str]], result: Checked) -> str:
    data = content.get("data")
    if not isinstance(data, dict):
        return ""
    if content["kind"] == "decision":
        answers.took(data, data.get("status"), data.get("payload") if data.get("status") == "resolved" else None)
        if data.get("passkey") is not None:
            return _passkey_problem(n, data)
    elif content["kind"] == "expiry":
        answers.took(data, "cancelled", None)  # an expired interrupt is answered cancelled (C14, C20)
    elif content["kind"] == RESUME_SENT:
        return _resume_problem(n, data, answers, secrets, result)
    return ""


class _Answers:
    """The answers the trail's decisions and expiries took, by (thread, interrupted run, interrupt): fingerprints."""

    def __init__(self) -> None:
        self.taken: dict[tuple, tuple[object, set[str]]] = {}

    def took(self, data: dict, status: object, payload: object) -> None:
        key = (data.get("threadId"), data.get("runId"), data.get("interruptId"))
        tool_call, prints = self.taken.setdefault(key, (data.get("toolCallId"), set()))
        try:
            prints.add(fingerprint(thread_id=key[0], run_id=key[1], interrupt_id=key[2], tool_call_id=tool_call,
                                   status=status, payload=payload))
        except (Unsignable, TypeError):
            pass  # never an answer a resume could match

    def problem(self, thread_id: object, run_id: object, sent: object) -> str:
        """Why the resume answer ``sent`` is not one the trail took, or ""."""
        if not isinstance(sent, dict):
            return "holds an answer that is not an object"
        interrupt_id, status = sent.get("interruptId"), sent.get("status")
        if (thread_id, run_id, interrupt_id) not in self.taken:
            return f"answers interrupt {interrupt_id!r}, which no decision or expiry before it closed"
        tool_call, prints = self.taken[(thread_id, run_id, interrupt_id)]
        try:
            answer = fingerprint(thread_id=thread_id, run_id=run_id, interrupt_id=interrupt_id,
                                 tool_call_id=tool_call, status=status,
                                 payload=sent.get("payload") if status == "resolved" else None)
        except (Unsignable, TypeError):
            answer = None
        if answer not in prints:
            return f"sends interrupt {interrupt_id!r} an answer no decision before it took"
        metadata = sent.get("metadata")
        attested = metadata.get("countersign") if isinstance(metadata, dict) else None
        if not isinstance(attested, dict) or attested.get("fingerprint") != answer:
            return f"attests another answer to interrupt {interrupt_id!r} than it sends"
        return ""


def _resume_problem(n: int, data: dict, answers: _Answers, secrets: dict[str, list[str]], result: Checked) -> str:
    # A resume as it left: its signature over the exact body (with its agent's secret, when given), and each
    # answer in it one that a decision or expiry earlier in the chain took, as the body itself attests.
    body, signature, agent = data.get("body"), data.get("signature"), data.get("agent")
    if not (isinstance(body, str) and isinstance(signature, str) and isinstance(agent, str)):
        return f"entry {n} is a resume without its agent, body or signature"
    try:
        sent = _json(body)
    except ValueError:
        return f"entry {n}'s resume body is not JSON"
    if not isinstance(sent, dict) or (sent.get("threadId"), sent.get("runId")) != (data.get("threadId"),
                                                                                     data.get("runId")):
        return f"entry {n}'s resume body is for another thread or run than the entry names"
    result.resumes += 1
    if agent not in secrets:
        result.unchecked.add(agent)
    elif not any(_signs(secret, signature, body.encode()) for secret in secrets[agent]):
        return f"entry {n}'s resume signature does not verify with the secret given for agent {agent!r}"
    else:
        result.signatures += 1
    if not isinstance(sent.get("resume"), list):
        result.unbound += 1
        return ""
    for answer in sent["resume"]:
        if problem := answers.problem(sent.get("threadId"), sent.get("parentRunId"), answer):
            return f"entry {n}'s resume {problem}"
    return ""


def _signs(secret: str, signature: str, body: bytes) -> bool:
    try:
        verify(secret, signature, body, now=0, tolerance=math.inf)  # as old as the trail: no age limit
    except SignatureError:
        return False
    return True


def _passkey_problem(n: int, data: dict) -> str:
    # A decision a passkey countersigned: its assertion must sign exactly this entry's answer.
    try:
        answer = fingerprint(thread_id=data["threadId"], run_id=data["runId"], interrupt_id=data["interruptId"],
                             tool_call_id=data["toolCallId"], status=data["status"], payload=data["payload"])
    except (KeyError, Unsignable):
        return f"entry {n} holds a passkey assertion but not the answer it signs"
    problem = passkey_problem(data["passkey"], answer)
    return f"entry {n}'s passkey assertion does not countersign its decision: {problem}" if problem else ""


def main(argv: list[str] | None = None) -> int:
    """Check the export file named on the command line; print what was found; 0 verified, 1 not, 2 unreadable."""
    parser = argparse.ArgumentParser(prog="python -m interrupts.verify_export",
                                     description="Check a Countersign audit export offline.")
    parser.add_argument("file", help="the export, as GET /api/audit/export/ gave it")
    parser.add_argument("--secrets", metavar="SECRETS.json",
                        help='agents\' signing secrets, to check the resumes\' signatures: {"agent": "secret"}, '
                             'or a list of every secret an agent had')
    args = parser.parse_args(argv)
    try:
        data = Path(args.file).read_bytes()
        secrets = _secrets(Path(args.secrets).read_bytes()) if args.secrets else {}
    except OSError as problem:
        print(f"cannot read {problem.filename}: {problem.strerror}", file=sys.stderr)
        return 2
    except ValueError as problem:
        print(f"cannot read {args.secrets}: {problem}", file=sys.stderr)
        return 2
    checked = check_export(data, secrets)
    if not checked.ok:
        print(f"DOES NOT VERIFY: {args.file}")
        for problem in checked.problems:
            print(f"  {problem}")
        if checked.more:
            print(f"  and {checked.more} more problems")
        return 1
    head = checked.head
    print(f"verified {checked.entries} entries, head {head['seq']}:{head['hash']}")
    if checked.resumes:
        print(f"{checked.resumes} resumes sent, each answer in them one a decision or expiry took; "
              f"{checked.signatures} signatures checked")
    if checked.unchecked:
        print(f"signatures not checked for {', '.join(sorted(checked.unchecked))}: no secret given (--secrets)")
    if checked.unbound:
        print(f"{checked.unbound} resumes carry their answers in their framework's own form (LangGraph's command): "
              "not matched to decisions")
    return 0


def _secrets(data: bytes) -> dict[str, list[str]]:
    """A secrets file's ``{"agent": "secret" | ["secret", ...]}`` as agent → secrets; ValueError if it is not that."""
    given = _json(data)
    if not isinstance(given, dict):
        raise ValueError('expected {"agent": "secret"}')
    secrets = {}
    for agent, secret in given.items():
        listed = [secret] if isinstance(secret, str) else secret
        if not (isinstance(listed, list) and listed and all(isinstance(s, str) for s in listed)):
            raise ValueError(f"agent {agent!r}: expected a secret, or a list of them")
        secrets[agent] = listed
    return secrets


if __name__ == "__main__":
    sys.exit(main())
