"""One body for every HTTP refusal, whichever door answers it."""

import pytest
from django.test import Client

from interrupts.hub import refusals
from interrupts.protocol.errors import ContractViolation, refusal_body


def test_the_body_has_code_and_detail_and_fields_only_when_some_are_invalid():
    assert refusal_body("TOO_LARGE", "Too long.") == {"code": "TOO_LARGE", "detail": "Too long."}
    assert refusal_body("INVALID_REQUEST", "Bad.", fields={"action": ["Unknown."]})["fields"] == {
        "action": ["Unknown."]
    }
    assert "fields" not in refusal_body("INVALID_REQUEST", "Bad.", fields={})


def test_a_detail_cannot_overwrite_the_code_or_the_sentence():
    problem = ContractViolation("EXPIRED", "It expired.", interrupt_id="i-1")
    problem.details["detail"] = "Something else."
    assert problem.body() == {"code": "EXPIRED", "detail": "It expired.", "interrupt_id": "i-1"}


def test_busy_says_when_to_try_again_and_the_status_follows_the_refusal():
    rendered = refusals.render(refusals.busy())
    assert (rendered.status, rendered.headers["Retry-After"]) == (503, str(refusals.BUSY_RETRY_AFTER))
    costly = refusals.render(ContractViolation("BUSY", "Checks queued.", retry_after=2))
    assert (costly.status, costly.headers["Retry-After"], costly.body["retry_after"]) == (503, "2", 2)
    assert refusals.render(ContractViolation("INVALID_PAYLOAD", "No.")).status == 400


@pytest.mark.django_db
@pytest.mark.parametrize("path", ["/api/threads/", "/agui/mailer/", "/agents/mailer/"])
def test_the_api_the_gateway_and_agent_endpoints_refuse_with_the_same_body(path):
    # A GET: each door refuses it (401 or 405) before reading anything.
    response = Client().get(path)
    assert response.status_code in (401, 405)
    body = response.json()
    assert set(body) == {"code", "detail"} and body["detail"]


def test_the_middleware_refuses_with_the_same_body():
    response = Client().get("/agui/mailer/?q=%00")
    assert response.status_code == 400
    assert response.json() == {"code": "NUL_CHARACTER", "detail": response.json()["detail"]}


# --- A database that cannot serve now: which fault, and what is said -------------------------
# Each exception below is a real one, raised by the driver meeting the fault; the end-to-end
# tests (tests/e2e/test_database_faults.py) meet the same faults through a served app.


def _raised(call):
    try:
        call()
    except Exception as problem:  # noqa: BLE001 (the fault is what is under test)
        return problem
    raise AssertionError("no fault was raised")


def _as_django(problem):
    """``problem`` as Django's wrapper raises it: django.db's class, the driver's error as the cause."""
    import django.db

    wrapped = getattr(django.db, type(problem).__name__, django.db.OperationalError)(*problem.args)
    wrapped.__cause__ = problem
    return wrapped


def _sqlite_full():
    import sqlite3

    connection = sqlite3.connect(":memory:")
    connection.execute("CREATE TABLE t (b BLOB)")
    connection.execute("PRAGMA max_page_count=1")  # raised to the current size: no room to grow
    connection.execute("INSERT INTO t VALUES (zeroblob(100000))")


def _sqlite_locked(tmp_path):
    import sqlite3

    path = tmp_path / "db.sqlite3"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN IMMEDIATE")
    sqlite3.connect(path, timeout=0, isolation_level=None).execute("BEGIN IMMEDIATE")


def _sqlite_unopenable(tmp_path):
    import sqlite3

    sqlite3.connect(tmp_path / "no" / "such" / "dir" / "db.sqlite3")


def _refused_connection():
    import psycopg

    from tests.servers import free_port

    psycopg.connect(f"postgresql://nobody:none@127.0.0.1:{free_port()}/none", connect_timeout=2)


def test_a_full_sqlite_database_is_database_full_with_a_long_retry_after():
    fault = refusals.database_fault(_as_django(_raised(_sqlite_full)))
    assert fault.code == "DATABASE_FULL" and not refusals.retry_on_fresh_connection(fault)
    rendered = refusals.render(fault)
    assert (rendered.status, rendered.headers["Retry-After"]) == (503, str(refusals.FULL_RETRY_AFTER))
    assert "nothing was changed" in rendered.body["detail"] and "free space" in rendered.body["detail"]


def test_a_locked_sqlite_database_is_busy_as_before(tmp_path):
    problem = _raised(lambda: _sqlite_locked(tmp_path))
    assert refusals.database_fault(_as_django(problem)).code == "BUSY"
    assert refusals.database_busy(_as_django(problem))


def test_a_sqlite_file_that_cannot_be_opened_is_unavailable(tmp_path):
    fault = refusals.database_fault(_as_django(_raised(lambda: _sqlite_unopenable(tmp_path))))
    assert fault.code == "DATABASE_UNAVAILABLE" and refusals.retry_on_fresh_connection(fault)


def test_a_refused_postgresql_connection_is_unavailable_and_worth_a_fresh_connection():
    problem = _raised(_refused_connection)
    for raised in (problem, _as_django(problem)):
        fault = refusals.database_fault(raised)
        assert fault.code == "DATABASE_UNAVAILABLE" and refusals.retry_on_fresh_connection(fault)
    rendered = refusals.render(fault)
    assert (rendered.status, rendered.headers["Retry-After"]) == (503, str(refusals.UNAVAILABLE_RETRY_AFTER))
    assert set(rendered.body) == {"code", "detail"} and "reload first" in rendered.body["detail"]


@pytest.mark.parametrize("sqlstate, code", [
    ("57P01", "DATABASE_UNAVAILABLE"),  # admin shutdown: pg_terminate_backend, a fast stop
    ("57P02", "DATABASE_UNAVAILABLE"),  # crash shutdown
    ("57P03", "DATABASE_UNAVAILABLE"),  # cannot connect now: starting up or shutting down
    ("08006", "DATABASE_UNAVAILABLE"),  # connection failure
    ("53300", "DATABASE_UNAVAILABLE"),  # too many connections
    ("53100", "DATABASE_FULL"),         # disk full
    ("55P03", "BUSY"),                  # lock_timeout
])
def test_postgresql_s_sqlstates_of_a_database_that_cannot_serve(sqlstate, code):
    from psycopg import errors

    # psycopg's own class for the SQLSTATE, as it raises it when the server sends that state.
    problem = errors.lookup(sqlstate)("as the server said it")
    assert refusals.database_fault(_as_django(problem)).code == code


def test_a_pool_timeout_is_busy_and_the_request_s_own_mistakes_are_not_faults():
    from django.db import IntegrityError, OperationalError
    from psycopg import errors
    from psycopg_pool import PoolTimeout

    assert refusals.database_fault(_as_django(PoolTimeout("couldn't get a connection after 20.00 sec"))).code == "BUSY"
    # A statement the request made wrong is its own error (a 500 to fix), not the database's state.
    for problem in (errors.lookup("42P01")("relation does not exist"), errors.lookup("57014")("canceled"),
                    errors.lookup("23505")("duplicate key")):
        assert refusals.database_fault(_as_django(problem)) is None
    assert refusals.database_fault(IntegrityError("UNIQUE constraint failed")) is None
    assert refusals.database_fault(OperationalError("no such table: x")) is None
    assert refusals.database_fault(ValueError("database is locked")) is None
