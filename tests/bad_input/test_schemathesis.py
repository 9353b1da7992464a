"""Schemathesis fuzzes every operation of the OpenAPI schema the app serves, over a real server.

Valid requests (by the schema) and invalid ones, for every operation at
``/api/schema/``: none may answer 5xx, and every 4xx must be the API's JSON
refusal ``{"code": ..., "detail": ...}``. Path parameters are drawn at random
and, as often, from real rows (a thread with a pending interrupt, an agent),
so requests get past the lookups into the code that decides.
"""

import json

import pytest
import schemathesis
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.errors import FailedHealthCheck, Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error

from ..e2e.conftest import pending, start, wait_for

# Per operation and mode: about 16 operations x 2 modes x 15 requests, some 30 s on a quiet machine.
EXAMPLES = 15
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,  # the same requests on every run: a failure here is reproducible
    database=None,
    phases=[Phase.explicit, Phase.generate],  # failures are collected, not shrunk: real HTTP makes shrinking slow
    suppress_health_check=list(HealthCheck),
)
# Invalid data cannot always be made (a free-form string in the path takes anything):
# the filter health check says so after a few dozen tries, where Unsatisfiable takes hundreds.
FUZZ_NEGATIVE = settings(FUZZ, suppress_health_check=set(HealthCheck) - {HealthCheck.filter_too_much})
# What every run of the suite must still find in the schema (more may come).
CORE_OPERATIONS = {
    "GET /api/agents/", "POST /api/agents/", "PUT /api/agents/{name}/", "DELETE /api/agents/{name}/",
    "GET /api/threads/", "POST /api/threads/", "GET /api/threads/{thread_id}/events/",
    "POST /api/threads/{thread_id}/runs/", "GET /api/interrupts/", "GET /api/interrupts/{id}/",
    "POST /api/interrupts/{id}/decide/", "GET /api/runs/{run_id}/",
}
DEMO_AGENTS = ["deployer", "mailer", "janitor", "filing", "planner", "bulk-mailer"]


def refusal_is_code_and_detail(ctx, response, case):
    """Custom check: a 4xx is the API's JSON refusal, ``{"code": <non-empty str>, "detail": <non-empty str>}``."""
    if not 400 <= response.status_code < 500:
        return None
    content_type = (response.headers.get("content-type") or [""])[0]
    assert content_type.split(";")[0].strip() == "application/json", (
        f"{response.status_code} answered as {content_type or 'no content type'}, not JSON: {response.text[:200]!r}"
    )
    try:
        body = json.loads(response.content)
    except ValueError:
        raise AssertionError(f"{response.status_code} says JSON but is not: {response.text[:200]!r}") from None
    assert isinstance(body, dict), f"{response.status_code} refusal is a JSON {type(body).__name__}, not an object"
    for key in ("code", "detail"):
        assert isinstance(body.get(key), str) and body[key], f"{response.status_code} refusal lacks {key!r}: {body}"
    return True


CHECKS = [not_a_server_error, refusal_is_code_and_detail]


@pytest.fixture(scope="module")
def known(doors):
    """Real values for path parameters: a thread waiting on an interrupt, its run, an agent to edit."""
    with doors.api() as api:
        run = start(api, "janitor")
        [interrupt] = wait_for(lambda: pending(api, run["thread"]))
        target = api.post("/api/agents/", json={"name": "fuzz-target", "url": "http://127.0.0.1:9/target/"})
        assert target.status_code == 201, target.text
    return {"thread_id": run["thread"], "run_id": run["run_id"], "id": str(interrupt["id"]), "name": "fuzz-target"}


def strategy(operation, mode, headers, known):
    """Cases for ``operation``: random path parameters or real ones, half and half."""
    draws = [operation.as_strategy(generation_mode=mode, headers=headers)]
    names = {p.name for p in operation.path_parameters}
    if names:
        real = {name: known[name] for name in names if name in known}
        draws.append(operation.as_strategy(generation_mode=mode, headers=headers, path_parameters=real))
    cases = st.one_of(draws)
    if operation.label == "POST /api/threads/" and mode == GenerationMode.POSITIVE:
        # A random agent name is refused before anything runs; a real one starts a run.
        cases = st.tuples(cases, st.sampled_from(DEMO_AGENTS)).map(lambda pair: _for_agent(*pair))
    return cases


def _for_agent(case, agent):
    if isinstance(case.body, dict):
        case.body = {**case.body, "agent": agent}
    return case


def test_no_operation_answers_5xx_or_an_unshaped_refusal(doors, known):
    headers = {"Authorization": f"Token {doors.token}"}
    schema = schemathesis.openapi.from_url(f"{doors.url}/api/schema/", headers=headers, timeout=30)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert CORE_OPERATIONS <= {op.label for op in operations}

    failures: dict[tuple, str] = {}
    statuses: dict[str, set[int]] = {}
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @(FUZZ if mode == GenerationMode.POSITIVE else FUZZ_NEGATIVE)
            @given(case=strategy(operation, mode, headers, known))
            def fuzz(case):
                response = case.call(headers=headers, timeout=30)
                statuses.setdefault(operation.label, set()).add(response.status_code)  # noqa: B023  (fuzz() runs within this iteration)
                try:
                    case.validate_response(response, checks=CHECKS, headers=headers)
                except (AssertionError, BaseExceptionGroup) as failure:
                    key = (operation.label, response.status_code, type(failure).__name__)  # noqa: B023
                    failures.setdefault(key, f"{failure}\n  reproduce: {case.as_curl_command(headers=headers)}")

            try:
                fuzz()
            except (FailedHealthCheck, Unsatisfiable):
                assert mode == GenerationMode.NEGATIVE, operation.label

    assert not failures, "\n\n".join(f"{label} -> {status}:\n{text}" for (label, status, _), text in failures.items())
    # The fuzzing reached the code behind the lookups, not only its refusals.
    assert set(statuses) == {op.label for op in operations}
    assert 201 in statuses["POST /api/threads/"], statuses["POST /api/threads/"]
    assert 200 in statuses["GET /api/interrupts/{id}/"] and 200 in statuses["GET /api/threads/{thread_id}/events/"]
    assert statuses["POST /api/interrupts/{id}/decide/"] & {201, 409}, statuses["POST /api/interrupts/{id}/decide/"]
