"""The Agents page says, per agent, how it pauses, how its latest resumes went and what it declares; its form.

``humanInTheLoop`` is read as AG-UI 1.0 says (C70, C72, C73, C74): omitted is
"not declared", only an explicit false is unsupported, a declaration of the
wrong type is not used and the page says so, unknown keys stay in the JSON.
"""

import pytest
from django.urls import reverse

from interrupts.models import Agent, Run
from interrupts.protocol import capabilities, dialects
from interrupts.web.forms import AgentForm

from .. import factories as make

pytestmark = pytest.mark.django_db


@pytest.fixture
def page(client):
    client.force_login(make.user())

    def read() -> str:
        response = client.get(reverse("agents"))
        assert response.status_code == 200
        return response.content.decode()

    return read


def row(html: str, agent: Agent) -> str:
    """The agent's row of the table, its text unescaped (markup stays escaped: ``&lt;`` is kept)."""
    start = html.index(f"<strong>{agent.name}</strong>")
    return html[start:html.index("</tr>", start)].replace("&#x27;", "'")


def test_each_agent_says_in_words_how_it_pauses(page):
    detected = make.agent(paused_as=dialects.LANGGRAPH_LEGACY)
    registered = make.agent(dialect=dialects.LANGGRAPH_LEGACY, paused_as=dialects.LANGGRAPH_LEGACY)
    adk, crewai, tanstack = (make.agent(paused_as=kind) for kind in ("adk", "crewai", "tanstack"))
    plain, never = make.agent(paused_as=dialects.AGUI), make.agent()
    html = page()
    assert "LangGraph's on_interrupt event (detected)" in row(html, detected)
    assert "LangGraph's on_interrupt event (as registered)" in row(html, registered)
    assert "registered as LangGraph on_interrupt" in row(html, registered)
    assert "Google ADK confirmations" in row(html, adk) and "CrewAI human feedback" in row(html, crewai)
    assert "TanStack AI interrupts" in row(html, tanstack)
    assert "Ends its runs with an AG-UI interrupt" in row(html, plain)
    assert "It has not paused yet" in row(html, never) and "registered as" not in row(html, never)


def resume(agent: Agent, status: str, message: str = "") -> Run:
    paused = make.run(make.thread(agent=agent), status="interrupted")
    return make.run(paused.thread, parent=paused, resume_key=f"key-{paused.run_id}", status=status,
                    error_code="RUN_ERROR" if message else "", error_message=message)


def test_each_agent_says_how_its_last_five_resumes_went_and_why_the_last_was_refused(page):
    agent, quiet = make.agent(), make.agent()
    resume(agent, "failed", "an old refusal, past the last five")
    resume(agent, "failed", "the message history does not contain a ModelResponse")
    for status in ("succeeded", "interrupted", "succeeded", "succeeded"):
        resume(agent, status)
    resume(agent, "queued")  # not ended: not counted
    html = page()
    assert ("Last 5 resumes: 4 accepted, 1 refused: the message history does not contain a ModelResponse"
            in row(html, agent))
    assert "old refusal" not in html
    assert "No resumes yet" in row(html, quiet)


def test_an_agent_s_refusal_is_quoted_as_text_never_markup(page):
    agent = make.agent()
    resume(agent, "failed", "<script>alert(1)</script>" + "x" * 1000)
    shown = row(page(), agent)
    assert "<script>" not in shown and "&lt;script&gt;" in shown and "x" * 400 not in shown


def test_c70_an_omitted_capability_is_not_declared_and_only_false_is_unsupported(page):
    silent = make.agent(capabilities={})
    partial = make.agent(capabilities={"humanInTheLoop": {"interrupts": True, "approveWithEdits": False}})
    html = page()
    assert "Human in the loop: not declared" in row(html, silent)
    shown = row(html, partial)
    assert "supports interrupt outcomes and resumes" in shown
    assert "does not support approval with edited arguments" in shown
    assert "not declared: a person in the loop, pauses for approval" in shown
    assert "does not support pauses for approval" not in shown


@pytest.mark.parametrize("declared, said", [
    ({"humanInTheLoop": {"interrupts": "yes"}}, "“interrupts” is text where true or false belongs"),
    ({"humanInTheLoop": "all of it"}, "it is text where an object of true/false fields belongs"),
    ({"humanInTheLoop": {"approvals": 1}}, "“approvals” is a number where true or false belongs"),
])
def test_c73_a_declaration_that_fails_validation_is_not_used_and_the_page_says_so(page, declared, said):
    agent = make.agent(capabilities=declared)
    shown = row(page(), agent)
    assert "declaration is not used: " + said in shown and "supports" not in shown
    read = capabilities.human_in_the_loop(declared)
    assert read.unused and not read.declared


def test_c72_c73_unknown_keys_are_no_reason_to_refuse_and_are_kept(page):
    declared = {"humanInTheLoop": {"approvals": True, "voiceApprovals": True}, "custom": {"mine": 1}}
    agent = make.agent(capabilities=declared)
    shown = row(page(), agent)
    assert "supports pauses for approval" in shown and "voiceApprovals" in shown
    assert Agent.objects.get(pk=agent.pk).capabilities == declared  # stored as declared


def test_the_page_costs_the_same_queries_however_many_agents_and_resumes(client):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    client.force_login(make.user())

    def count() -> int:
        with CaptureQueriesContext(connection) as queries:
            assert client.get(reverse("agents")).status_code == 200
        return len(queries)

    first = make.agent(paused_as="adk")
    resume(first, "succeeded")
    few = count()
    for n in range(6):
        agent = make.agent(paused_as=("crewai", dialects.LANGGRAPH_LEGACY)[n % 2],
                           capabilities={"humanInTheLoop": {"interrupts": True}})
        resume(agent, "failed", f"refused {n}")
        resume(agent, "succeeded")
    assert count() == few


# --- the form: labels in words, no offer to remove a credential that is not there, and capabilities
# ticked in boxes while the model (and the API) keep one JSON object


POST = {"name": "ext", "url": "http://127.0.0.1:9/x/", "description": "", "auth_header": "", "auth_value": ""}


@pytest.fixture
def staff(client):
    user = make.user(is_staff=True)
    client.force_login(user)
    return user


def test_labels_read_as_words_without_colons(client, staff):
    page = client.get(reverse("agent-add")).content.decode()
    assert '<label for="id_url">URL</label>' in page
    assert "Url" not in page and "URL:" not in page and "Auth header" not in page
    assert '<label for="id_auth_header">Credential header</label>' in page
    assert "<legend>People in the loop</legend>" in page and "Raises interrupts for a person to answer" in page


def test_a_credential_that_does_not_exist_is_not_offered_for_removal(client, staff):
    bare = make.agent(name="bare")
    assert "Remove the stored credential" not in client.get(reverse("agent-edit", args=[bare.name])).content.decode()
    kept = make.agent(name="kept", auth_header="Authorization", auth_value="Bearer sk-1234")
    assert "Remove the stored credential" in client.get(reverse("agent-edit", args=[kept.name])).content.decode()


def test_ticked_capabilities_join_the_json_the_model_keeps(client, staff):
    response = client.post(reverse("agent-add"), {**POST, "cap_humanInTheLoop": ["interrupts", "approveWithEdits"],
                                                  "cap_state": ["snapshots"],
                                                  "capabilities": '{"identity": {"version": "1.2"}}'})
    assert response.status_code == 200  # the signing secret, shown once
    assert Agent.objects.get(name="ext").capabilities == {
        "identity": {"version": "1.2"}, "humanInTheLoop": {"interrupts": True, "approveWithEdits": True},
        "state": {"snapshots": True}}


def test_the_boxes_show_what_is_stored_and_unticking_removes_it(client, staff):
    agent = make.agent(name="caps", capabilities={"humanInTheLoop": {"interrupts": True, "feedback": False},
                                                   "custom": {"x": 1}})
    form = AgentForm(instance=agent)
    assert form.initial["cap_humanInTheLoop"] == ["interrupts"]
    # The JSON field holds the rest only: a box is never said twice.
    assert form.initial["capabilities"] == {"humanInTheLoop": {"feedback": False}, "custom": {"x": 1}}
    response = client.post(reverse("agent-edit", args=[agent.name]), {
        **POST, "name": "caps", "capabilities": '{"humanInTheLoop": {"feedback": false}, "custom": {"x": 1}}'})
    assert response.status_code == 302
    agent.refresh_from_db()
    assert agent.capabilities == {"humanInTheLoop": {"feedback": False}, "custom": {"x": 1}}


def test_a_post_with_json_alone_keeps_it_and_bad_json_is_a_form_error(client, staff):
    client.post(reverse("agent-add"), {**POST, "capabilities": '{"tools": {"supported": true}}'})
    assert Agent.objects.get(name="ext").capabilities == {"tools": {"supported": True}}
    response = client.post(reverse("agent-add"), {**POST, "name": "ext2", "capabilities": "[1, 2]"})
    assert response.status_code == 200 and "Give a JSON object" in response.content.decode()
    assert not Agent.objects.filter(name="ext2").exists()
    client.post(reverse("agent-add"), {**POST, "name": "ext3", "capabilities": ""})
    assert Agent.objects.get(name="ext3").capabilities == {}


def test_each_policy_says_whether_it_always_asks_and_what_expiry_does(page):
    from django.contrib.auth.models import Group

    agent = make.agent()
    oncall = Group.objects.create(name="Oncall")
    make.policy(agent=agent, name="careful", always_ask=True, target_minutes=30, backup_group=oncall,
                on_expiry="escalate")
    shown = page()
    assert "always from a person (no grants)" in shown
    assert "escalates to Oncall before it expires" in shown
