"""Every COUNTERSIGN_* default and every limit is declared once, in interrupts/conf.py, and read from there."""

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from interrupts import conf
from interrupts.api.serializers import DecideSerializer, StartThreadSerializer
from interrupts.web.forms import DecideForm, StartRunForm


def test_unset_the_environment_gives_conf_defaults():
    values = conf.from_environment({})
    assert values["COUNTERSIGN_MAX_STREAMS"] == conf.DEFAULTS["COUNTERSIGN_MAX_STREAMS"] == 50
    assert values["COUNTERSIGN_MAX_AGENT_STREAMS"] == 10  # derived from MAX_STREAMS, not declared twice
    assert values["COUNTERSIGN_DEMO_REQUIRE_SIGNATURE"] is False


def test_the_environment_is_parsed_by_the_type_of_the_default():
    values = conf.from_environment({"COUNTERSIGN_MAX_STREAMS": "4", "COUNTERSIGN_IDLE_TIMEOUT": "1.5",
                                    "COUNTERSIGN_DEMO_REQUIRE_SIGNATURE": "yes", "COUNTERSIGN_AGENT_NETWORKS": ""})
    assert (values["COUNTERSIGN_MAX_STREAMS"], values["COUNTERSIGN_MAX_AGENT_STREAMS"]) == (4, 3)
    assert values["COUNTERSIGN_IDLE_TIMEOUT"] == 1.5 and values["COUNTERSIGN_DEMO_REQUIRE_SIGNATURE"] is True
    with pytest.raises(ImproperlyConfigured, match="COUNTERSIGN_RETRY_ATTEMPTS"):
        conf.from_environment({"COUNTERSIGN_RETRY_ATTEMPTS": "many"})
    with pytest.raises(ImproperlyConfigured, match="below COUNTERSIGN_MAX_STREAMS"):
        conf.from_environment({"COUNTERSIGN_MAX_STREAMS": "4", "COUNTERSIGN_MAX_AGENT_STREAMS": "4"})


def test_conf_settings_follow_django_settings_and_fall_back_to_the_default(settings):
    settings.COUNTERSIGN_MAX_AGENT_STREAMS = 1
    assert conf.settings.COUNTERSIGN_MAX_AGENT_STREAMS == 1
    del settings.COUNTERSIGN_RETRY_BASE
    assert conf.settings.COUNTERSIGN_RETRY_BASE == conf.DEFAULTS["COUNTERSIGN_RETRY_BASE"]
    with override_settings(COUNTERSIGN_AGENT_NETWORKS="10.0.0.0/8"):
        assert conf.settings.COUNTERSIGN_AGENT_NETWORKS == "10.0.0.0/8"
    with pytest.raises(AttributeError):
        conf.settings.COUNTERSIGN_NO_SUCH_THING  # noqa: B018


def test_forms_and_serializers_enforce_the_same_limits():
    assert DecideForm.base_fields["comment"].max_length == DecideSerializer().fields["comment"].max_length \
        == conf.MAX_COMMENT_CHARS
    assert StartRunForm.base_fields["message"].max_length == StartThreadSerializer().fields["message"].max_length \
        == conf.MAX_MESSAGE_CHARS
    assert (
        # (Less the card's "Approve and grant", which approves, then makes a grant: hub.grants.)
        [c for c, _ in DecideForm.base_fields["action"].choices if c != "grant"]
        == list(DecideSerializer().fields["action"].choices)
        == list(conf.ACTIONS)
    )


@pytest.mark.django_db
def test_the_card_bounds_a_comment_as_the_form_does(client):
    from django.urls import reverse

    from .. import factories as make

    client.force_login(make.user(is_staff=True))
    make.interrupt(make.run(status="interrupted"))
    page = client.get(reverse("inbox")).content.decode()
    assert f'name="comment" maxlength="{conf.MAX_COMMENT_CHARS}"' in page


def test_every_setting_is_declared_once_with_what_it_does():
    names = [setting.name for setting in conf.SETTINGS]
    assert len(names) == len(set(names)) == len(conf.DEFAULTS)
    assert list(conf.DEFAULTS) == names
    assert all(setting.doc.strip().endswith((".", ")")) for setting in conf.SETTINGS)


def test_the_settings_table_writes_defaults_as_they_are_read():
    assert conf.shown(5.0) == "`5`" and conf.shown(1.5) == "`1.5`"
    assert conf.shown(8 * conf.MIB) == "`8388608` (8 MiB)"
    assert conf.shown(False) == "`false`" and conf.shown("") == conf.shown(None) == "unset"
    table = conf.settings_table().splitlines()
    assert len(table) == 2 + len(conf.SETTINGS)
    assert "| `COUNTERSIGN_MAX_STREAMS` | `50` |" in table[2 + [s.name for s in conf.SETTINGS].index(
        "COUNTERSIGN_MAX_STREAMS")]
