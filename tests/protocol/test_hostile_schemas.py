"""responseSchemas written by a hostile agent: nothing fetched, linear-time
patterns, bounded size and bounded validation work.
"""

from __future__ import annotations

import http.server
import os
import re
import sys
import threading
import time
from datetime import UTC, datetime

import pytest
from ag_ui.core import Interrupt, ResumeEntry

from interrupts.protocol.contract import check_entry, interrupt_problems
from interrupts.protocol.errors import ContractViolation
from interrupts.protocol.schema import checks, patterns, payloads
from interrupts.protocol.schema.checks import check_schema
from interrupts.protocol.schema.limits import (
    FAST_VALIDATION_STEPS,
    MAX_PATTERN_CHARS,
    MAX_SCHEMA_BYTES,
    MAX_SCHEMA_DEPTH,
    MAX_SCHEMA_PATTERN_CHARS,
)
from interrupts.protocol.schema.payloads import payload_errors, validate_payload
from interrupts.protocol.schema.scan import schema_problems

NOW = datetime(2026, 4, 20, 12, 0, tzinfo=UTC)
# A bomb the budget cuts off ends in well under a second; one it did not would run for
# hours (2**40 paths). The bound only has to tell those apart, and at 0.5 s a loaded
# CI machine crossed it (0.63 s on the PostgreSQL pass) while the budget worked.
# CPU seconds of the checking thread: other tests running beside it do not count.
BOUNDED = 2.0


def refusal(schema, payload, **kwargs) -> ContractViolation:
    with pytest.raises(ContractViolation) as exc:
        payload_errors(schema, payload, **kwargs)
    return exc.value


def codes(schema) -> list[str]:
    return [p.code for p in schema_problems(schema, interrupt_id="int-h")]


def interrupt(schema) -> Interrupt:
    return Interrupt(id="int-h", reason="input_required", responseSchema=schema)


def answer(status="resolved", payload=None) -> ResumeEntry:
    return ResumeEntry(interruptId="int-h", status=status, payload=payload)


# --------------------------------------------------------------------------- #
# Remote references: flagged at raise time, refused on answer, never fetched
# --------------------------------------------------------------------------- #


@pytest.fixture
def recording_server():
    """A real HTTP server on 127.0.0.1 that records every request it gets."""
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            seen.append(self.path)
            body = b'{"type": "string"}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", seen
    finally:
        server.shutdown()
        server.server_close()


def _remote_schemas(base: str) -> dict[str, dict]:
    return {
        "http": {"$ref": f"{base}/remote.json"},
        "nested http": {"type": "object", "properties": {"to": {"$ref": f"{base}/email.json"}}},
        "relative against a remote $id": {"$id": f"{base}/root.json", "properties": {"a": {"$ref": "other.json"}}},
        "$dynamicRef": {"$dynamicRef": f"{base}/dyn.json#meta"},
        "embedded $id then up and out": {"$defs": {"x": {"$id": f"{base}/dir/x.json", "$ref": "../y.json"}},
                                         "$ref": f"{base}/dir/x.json"},
    }


@pytest.mark.parametrize("name", list(_remote_schemas("http://h")))
def test_remote_refs_are_flagged_refused_and_never_fetched(recording_server, name):
    base, seen = recording_server
    schema = _remote_schemas(base)[name]
    problems = interrupt_problems(interrupt(schema))
    assert [p.code for p in problems] == ["REMOTE_REF"]
    assert problems[0].details["interrupt_id"] == "int-h"
    assert "/$ref" in problems[0].details["pointer"] or "/$dynamicRef" in problems[0].details["pointer"]
    assert "cancelled" in problems[0].message

    with pytest.raises(ContractViolation) as exc:
        check_entry(interrupt(schema), answer(payload={"a": "x"}), NOW)
    assert exc.value.code == "REMOTE_REF"
    assert refusal(schema, "x").code == "REMOTE_REF"
    with pytest.raises(ContractViolation):
        validate_payload(schema, "x")
    check_entry(interrupt(schema), answer("cancelled"), NOW)  # cancelling stays possible
    assert seen == []


def test_the_validator_itself_never_fetches_even_past_the_scan(recording_server, monkeypatch):
    # With the static scan out of the way, the registry is what refuses.
    base, seen = recording_server
    monkeypatch.setattr(checks, "schema_problems", lambda *a, **k: [])
    for schema in _remote_schemas(base).values():
        assert refusal(schema, {"a": "x", "to": "x"}).code == "INVALID_SCHEMA"
    # Through an unknown keyword, where the scan treats it as a schema anyway.
    assert refusal({"x-extra": {"$ref": f"{base}/r.json"}, "$ref": "#/x-extra"}, "x").code == "INVALID_SCHEMA"
    assert seen == []


@pytest.mark.parametrize("ref", ["https://example.com/s.json", "file:///etc/passwd", "urn:example:other",
                                 "other.json", "//evil.example/s.json", "http://[::1/x"])
def test_other_remote_schemes_are_flagged(ref):
    assert codes({"properties": {"a": {"$ref": ref}}}) == ["REMOTE_REF"]
    assert schema_problems({"$ref": ref})[0].details["pointer"] == "/$ref"


def test_ref_looking_data_is_not_a_reference():
    assert codes({"enum": [{"$ref": "http://x/"}], "default": {"$ref": "http://x/"},
                  "properties": {"$ref": {"type": "string"}, "enum": {"pattern": "^a$"}}}) == []


@pytest.mark.parametrize(
    "schema, good, bad",
    [
        ({"$defs": {"x": {"type": "integer"}}, "properties": {"n": {"$ref": "#/$defs/x"}}}, {"n": 1}, {"n": "1"}),
        ({"$id": "https://example.com/root.json", "$defs": {"x": {"type": "integer"}},
          "properties": {"n": {"$ref": "root.json#/$defs/x"}}}, {"n": 1}, {"n": "1"}),
        ({"$id": "https://example.com/root.json",
          "$defs": {"x": {"$id": "https://example.com/int.json", "type": "integer"}},
          "properties": {"n": {"$ref": "int.json"}}}, {"n": 1}, {"n": "1"}),
        ({"$id": "urn:example:root", "$defs": {"x": {"type": "integer"}},
          "properties": {"n": {"$ref": "urn:example:root#/$defs/x"}, "m": {"$ref": "#/$defs/x"}}}, {"n": 1, "m": 2},
         {"m": "2"}),
        ({"$defs": {"x": {"$anchor": "num", "type": "integer"}}, "properties": {"n": {"$ref": "#num"}}}, {"n": 1},
         {"n": "1"}),
    ],
)
def test_local_refs_still_validate(schema, good, bad):
    assert codes(schema) == []
    assert payload_errors(schema, good) == []
    assert payload_errors(schema, bad) != []


def test_recursive_tree_schema_validates():
    tree = {"$defs": {"node": {"type": "object", "properties": {
        "name": {"type": "string"}, "children": {"type": "array", "items": {"$ref": "#/$defs/node"}}},
        "required": ["name"]}}, "$ref": "#/$defs/node"}
    good = {"name": "a", "children": [{"name": "b", "children": [{"name": "c"}]}]}
    assert codes(tree) == [] and payload_errors(tree, good) == []
    assert [e["path"] for e in payload_errors(tree, {"name": "a", "children": [{"children": []}]})] == ["/children/0"]


def test_dialect_switch_in_a_subschema_stays_bounded():
    # "$schema": draft-07 would make jsonschema switch to its stock (re, unmetered) validator.
    schema = {"properties": {"a": {"$schema": "http://json-schema.org/draft-07/schema#", "pattern": "^(a+)+$"}}}
    started = time.thread_time()
    assert [e["path"] for e in payload_errors(schema, {"a": "a" * 40 + "!"})] == ["/a"]
    assert time.thread_time() - started < BOUNDED


# --------------------------------------------------------------------------- #
# Patterns on RE2
# --------------------------------------------------------------------------- #


def test_catastrophic_pattern_is_linear_with_the_right_verdict():
    schema = {"type": "string", "pattern": "^(a+)+$"}
    started = time.thread_time()
    bad = payload_errors(schema, "a" * 40 + "!")
    good = payload_errors(schema, "a" * 40)
    assert time.thread_time() - started < 0.1  # Python's re: 9.8 s for 28 characters
    assert len(bad) == 1 and "does not match" in bad[0]["message"]
    assert good == []


@pytest.mark.parametrize("pattern", [r"(a)\1", r"(?=a)a", r"(?!a)b", r"(?<=a)b", r"(?<!a)b", r"(?>a)"])
def test_patterns_re2_cannot_run_are_unsafe(pattern):
    for schema in ({"pattern": pattern}, {"patternProperties": {pattern: {}}}):
        problems = [p for p in schema_problems(schema, interrupt_id="int-h") if p.code == "UNSAFE_PATTERN"]
        assert problems and problems[0].details["interrupt_id"] == "int-h"
        assert refusal(schema, {"a": "a"}).code in {"UNSAFE_PATTERN", "INVALID_SCHEMA"}
    assert refusal({"pattern": r"(a)\1"}, "aa").code == "UNSAFE_PATTERN"
    assert schema_problems({"properties": {"x": {"pattern": r"(a)\1"}}})[0].details["pointer"] == \
        "/properties/x/pattern"


def test_a_pattern_too_big_for_re2_is_unsafe():
    assert codes({"pattern": "((a{100}){100}){100}"}) == ["UNSAFE_PATTERN"]


def test_unicode_escapes_and_search_semantics():
    assert payload_errors({"pattern": "\\u00e9t\\u00e9"}, "un été chaud") == []  # unanchored search
    assert payload_errors({"pattern": "^\\u00e9"}, "xé") != []
    assert payload_errors({"pattern": "\\\\u0041"}, "\\u0041") == []  # an escaped backslash stays literal


SEMANTICS = [
    ({"patternProperties": {"^x-": {"type": "integer"}}}, {"x-a": 1, "y": "s"}, []),
    ({"patternProperties": {"^x-": {"type": "integer"}}}, {"x-a": "s"}, ["/x-a"]),
    ({"properties": {"a": {}}, "patternProperties": {"^x-": {}, "\\d$": {}}, "additionalProperties": False},
     {"a": 1, "x-b": 1, "c1": 1}, []),
    ({"properties": {"a": {}}, "patternProperties": {"^x-": {}}, "additionalProperties": False},
     {"a": 1, "zz": 1}, [""]),
    ({"patternProperties": {"^x-": {}}, "additionalProperties": {"type": "string"}}, {"x-a": 1, "b": 2}, ["/b"]),
    ({"patternProperties": {"^x-": {"type": "integer"}}, "unevaluatedProperties": False}, {"x-a": 1}, []),
    ({"patternProperties": {"^x-": {"type": "integer"}}, "unevaluatedProperties": False}, {"x-a": 1, "b": 1}, [""]),
    ({"allOf": [{"patternProperties": {"^x-": {}}}], "unevaluatedProperties": False}, {"x-a": 1, "b": 1}, [""]),
    ({"uniqueItems": True}, [{"a": 1}, {"a": 1.0}], [""]),
    ({"uniqueItems": True}, [1, True, "1", None, [1], {"a": [1]}], []),
    ({"uniqueItems": True}, [{"a": 1, "b": 2}, {"b": 2, "a": 1}], [""]),
]


@pytest.mark.parametrize("schema, payload, paths", SEMANTICS)
def test_keyword_semantics_match_stock_jsonschema(schema, payload, paths):
    from jsonschema import Draft202012Validator

    stock = sorted({"/".join([""] + [str(p) for p in e.absolute_path]) if e.absolute_path else ""
                    for e in Draft202012Validator(schema).iter_errors(payload)})
    ours = payload_errors(schema, payload)
    assert sorted({e["path"] for e in ours}) == stock == paths
    assert [e["message"] for e in ours] == sorted(e.message for e in Draft202012Validator(schema).iter_errors(payload))


# --------------------------------------------------------------------------- #
# Size, depth and the work budget
# --------------------------------------------------------------------------- #


def _bomb(levels: int) -> dict:
    defs = {f"l{i}": {"allOf": [{"$ref": f"#/$defs/l{i + 1}"}, {"$ref": f"#/$defs/l{i + 1}"}]} for i in range(levels)}
    defs[f"l{levels}"] = {"type": "string"}
    return {"$defs": defs, "$ref": "#/$defs/l0"}


def test_the_doubling_ref_bomb_is_too_costly_and_quick():
    bomb = _bomb(40)
    assert codes(bomb) == []  # small, local, valid: only its work is unbounded
    check_schema(bomb)
    started = time.thread_time()
    err = refusal(bomb, "x", interrupt_id="int-h")
    assert time.thread_time() - started < BOUNDED
    assert err.code == "SCHEMA_TOO_COSTLY" and err.details["interrupt_id"] == "int-h"
    assert "more checking than Countersign allows" in err.message
    with pytest.raises(ContractViolation) as exc:
        check_entry(interrupt(bomb), answer(payload="x"), NOW)
    assert exc.value.code == "SCHEMA_TOO_COSTLY"
    assert payload_errors(_bomb(5), "x") == []  # 32 paths: well within the budget


@pytest.mark.parametrize("leaf, payload", [
    ({"anyOf": [False] * 1000}, 1),
    ({"enum": list(range(5000))}, -1),
    ({"items": True}, [0] * 20000),
    ({"uniqueItems": True}, [{"a": i} for i in range(3000)]),
])
def test_bomb_shapes_hit_the_budget_quickly(leaf, payload):
    bomb = _bomb(40)
    bomb["$defs"]["l40"] = leaf
    started = time.thread_time()
    assert refusal(bomb, payload).code == "SCHEMA_TOO_COSTLY"
    assert time.thread_time() - started < BOUNDED


def test_ref_cycles_stay_invalid_schema():
    assert refusal({"$ref": "#"}, 1).code == "INVALID_SCHEMA"
    assert refusal({"$defs": {"a": {"$ref": "#/$defs/b"}, "b": {"$ref": "#/$defs/a"}}, "$ref": "#/$defs/a"},
                   1).code == "INVALID_SCHEMA"


def test_budget_is_a_keyword_argument_and_per_call():
    schema = {"type": "array", "items": {"type": "integer"}}
    assert payload_errors(schema, list(range(100))) == []
    assert refusal(schema, list(range(100)), max_steps=50).code == "SCHEMA_TOO_COSTLY"
    assert payload_errors(schema, list(range(100))) == []  # the small budget did not stick


def test_two_threads_do_not_share_a_budget():
    # The budget is found as under twice what one validation takes: two
    # validations overlapping on a shared counter would overdraw it.
    schema = {"type": "array", "items": {"type": "integer"}}
    payload = list(range(5000))
    budget = 1  # the smallest power of two one validation fits in: under twice what it takes
    while True:
        try:
            payload_errors(schema, payload, max_steps=budget)
            break
        except ContractViolation:
            budget *= 2
    old_interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads often, so the validations interleave
    barrier = threading.Barrier(2)
    results: list = []

    def run():
        barrier.wait()
        for _ in range(20):
            try:
                results.append(payload_errors(schema, payload, max_steps=budget))
            except ContractViolation as exc:
                results.append(exc.code)

    threads = [threading.Thread(target=run) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old_interval)
    assert results == [[]] * 40


def test_big_and_deep_schemas_are_too_large():
    big = {"type": "object", "properties": {f"f{i:06d}": {"type": "string"} for i in range(MAX_SCHEMA_BYTES // 20)}}
    deep: dict = {}
    node = deep
    for _ in range(MAX_SCHEMA_DEPTH):
        node["not"] = {}
        node = node["not"]
    very_deep: dict = {}
    node = very_deep
    for _ in range(100_000):  # far past the recursion limit: the walks are iterative
        node["not"] = {}
        node = node["not"]
    for schema in (big, deep, very_deep):
        problems = interrupt_problems(interrupt(schema))
        assert [p.code for p in problems] == ["SCHEMA_TOO_LARGE"]
        assert problems[0].details["interrupt_id"] == "int-h"
        with pytest.raises(ContractViolation) as exc:
            check_schema(schema)
        assert exc.value.code == "SCHEMA_TOO_LARGE"
        assert refusal(schema, {}).code == "SCHEMA_TOO_LARGE"
        with pytest.raises(ContractViolation) as exc:
            check_entry(interrupt(schema), answer(payload={}), NOW)
        assert exc.value.code == "SCHEMA_TOO_LARGE"
        check_entry(interrupt(schema), answer("cancelled"), NOW)
    assert "/not" * 10 in schema_problems(very_deep)[0].details["pointer"]
    assert schema_problems(big, max_bytes=10 * MAX_SCHEMA_BYTES) == []
    # Just within the depth limit is fine.
    ok: dict = {}
    node = ok
    for _ in range(MAX_SCHEMA_DEPTH - 1):
        node["not"] = {}
        node = node["not"]
    assert codes(ok) == []


def test_costly_checks_run_in_the_worker_process_with_the_same_verdict(monkeypatch):
    # Past the fast budget an answer is checked again in the worker process, so
    # a CPU-bound check never holds the server's interpreter. The in-process
    # function is wrapped here: the worker runs its own copy, unwrapped.
    in_process = []
    real = payloads.errors_within

    def noted(schema, payload, steps):
        in_process.append(steps)
        return real(schema, payload, steps)

    monkeypatch.setattr(payloads, "errors_within", noted)
    schema = {"type": "array", "items": {"type": "integer", "minimum": 0}}
    payload = list(range(3000)) + [-1, "x"]
    errors = payload_errors(schema, payload)
    assert in_process == [FAST_VALIDATION_STEPS]
    assert errors == [{"path": "/3000", "message": "-1 is less than the minimum of 0"},
                      {"path": "/3001", "message": "'x' is not of type 'integer'"}]
    assert payload_errors(schema, list(range(10))) == [] and in_process[-1] == FAST_VALIDATION_STEPS
    assert refusal(_bomb(40), "x").code == "SCHEMA_TOO_COSTLY"  # refused in the worker, reported here
    assert refusal({"$ref": "#"}, list(range(6000))).code == "INVALID_SCHEMA"


def test_a_costly_check_that_cannot_get_its_turn_is_busy(monkeypatch, tmp_path):
    monkeypatch.setattr(payloads, "COSTLY_WAIT_SECONDS", 0.2)
    payload_errors({"type": "array"}, list(range(6000)))  # the worker is up
    # The worker reads a pipe nobody writes to yet: it is busy until the test says.
    gate = tmp_path / "gate"
    os.mkfifo(gate)
    occupied = payloads._costly_pool().submit(gate.read_text)
    err = refusal(_bomb(40), "x", interrupt_id="int-b")
    assert err.code == "BUSY" and err.details["interrupt_id"] == "int-b"
    assert not occupied.done()
    gate.write_text("done")
    assert occupied.result() == "done"
    # Its turn comes (a refused check already handed to the worker still runs first: budget-bound).
    monkeypatch.setattr(payloads, "COSTLY_WAIT_SECONDS", 10.0)
    assert refusal(_bomb(40), "x").code == "SCHEMA_TOO_COSTLY"


def _compiles(monkeypatch) -> tuple[list[str], list[int]]:
    """What this process compiles from now on: patterns given to Python's re, lengths given to RE2."""
    python_compiled: list[str] = []
    re2_compiled: list[int] = []
    python_compile, re2_compile = re.compile, patterns.re2.compile

    def by_python(pattern, *args, **kwargs):
        python_compiled.append(pattern)
        return python_compile(pattern, *args, **kwargs)

    def by_re2(pattern, *args, **kwargs):
        re2_compiled.append(len(pattern))
        return re2_compile(pattern, *args, **kwargs)

    monkeypatch.setattr(re, "compile", by_python)
    monkeypatch.setattr(patterns.re2, "compile", by_re2)
    patterns.compiled.cache_clear()
    return python_compiled, re2_compiled


def test_the_regex_format_is_checked_by_re2_not_by_python_s_compile(monkeypatch):
    # Python's re.compile took 5.4 s on this 17 KB answer (case-insensitive classes), charged 66 steps.
    costly = "(?i)" + r"[a-\x{10fff0}]" * 1000
    schema = {"type": "object", "properties": {"r": {"type": "string", "format": "regex"}}, "required": ["r"]}
    python_compiled, re2_compiled = _compiles(monkeypatch)
    verdicts = [payload_errors(schema, {"r": answer}) for answer in (costly, "^a+$", "(a", r"(\w)\1")]
    # Too long to compile (MAX_PATTERN_CHARS); fine; not a regex; RE2 has no backreferences.
    assert [bool(errors) for errors in verdicts] == [True, False, True, True]
    assert codes({"type": "string", "pattern": costly}) == ["UNSAFE_PATTERN"]
    assert codes({"type": "string", "pattern": "(?i)" + r"[a-\x{10fff0}]" * 60}) == []
    assert not set(python_compiled) & {costly, "^a+$", "(a", r"(\w)\1"}
    assert re2_compiled and max(re2_compiled) <= MAX_PATTERN_CHARS


def test_pattern_text_is_bounded_per_pattern_and_per_schema(monkeypatch):
    # RE2 compiles in linear time, but a case-folded Unicode class still costs ~30 ms per
    # 1,000 characters: ten interrupts of distinct 64 KiB patterns held a server 12 s.
    slow = "(?i)" + r"\pL" * 2000
    _, re2_compiled = _compiles(monkeypatch)
    assert codes({"pattern": slow}) == ["UNSAFE_PATTERN"]
    assert re2_compiled == []  # refused for its length, uncompiled
    many = {"type": "object", "properties": {f"p{n}": {"type": "string", "pattern": "(?i)" + r"\pL" * 300 + str(n)}
                                             for n in range(40)}}
    problems = schema_problems(many)
    assert problems and {p.code for p in problems} == {"UNSAFE_PATTERN"}
    assert any("in all" in p.message for p in problems)
    # Past the schema's pattern text in all, the rest were refused without being compiled.
    assert 0 < sum(re2_compiled) <= MAX_SCHEMA_PATTERN_CHARS + MAX_PATTERN_CHARS
    # A long regex answer is charged as the compile it needs: it goes to the worker, not this thread.
    schema = {"type": "object", "properties": {"r": {"type": "string", "format": "regex"}}}
    assert payload_errors(schema, {"r": "(?i)" + r"\pL" * 60}) == []
