"""An agent's humanInTheLoop declaration read as AG-UI 1.0 says (C70, C72, C73, C74)."""

from interrupts.protocol import capabilities


def test_c74_the_group_s_fields_are_the_six_optional_booleans():
    assert [name for name, _words in capabilities.HUMAN_IN_THE_LOOP] == [
        "supported", "approvals", "interrupts", "approveWithEdits", "interventions", "feedback"]


def test_c70_omitted_and_null_are_not_declared_and_only_false_is_unsupported():
    read = capabilities.human_in_the_loop({"humanInTheLoop": {"interrupts": False, "approvals": None}})
    values = {name: value for name, _words, value in read.fields}
    assert values["interrupts"] is False and values["approvals"] is None and values["feedback"] is None
    assert "does not support interrupt outcomes and resumes" in read.words()
    assert "pauses for approval" in read.words().split("not declared: ")[1]
    for nothing in (None, {}, [], "text", {"tools": {"supported": True}}):
        assert capabilities.human_in_the_loop(nothing).words() == "Human in the loop: not declared"


def test_c73_a_boolean_field_of_another_type_makes_the_group_unused_and_unknown_members_do_not():
    assert capabilities.human_in_the_loop({"humanInTheLoop": {"feedback": "true"}}).unused
    assert capabilities.human_in_the_loop({"humanInTheLoop": {"feedback": [True]}}).unused
    kept = capabilities.human_in_the_loop({"humanInTheLoop": {"feedback": True, "x" * 500: True}})
    assert not kept.unused and kept.declared and kept.unknown == ("x" * capabilities.MAX_KEY_CHARS,)


def test_a_declaration_naming_many_unknown_keys_names_a_bounded_few():
    read = capabilities.human_in_the_loop({"humanInTheLoop": {f"k{n:03}": True for n in range(500)}})
    assert len(read.unknown) == capabilities.MAX_KEYS_NAMED + 1 and read.unknown[-1] == "490 more"
