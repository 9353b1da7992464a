"""Countersign on a phone's width (390 px) in real Chromium: every control of the header stays on screen."""

import pytest

from .conftest import Reviewer

# What a page looks like (its layout, contrast, axe's findings, its forms) is the same on either back end:
# `make test` checks it on SQLite, and `make test-scale` leaves it out (``backend_free``).
pytestmark = pytest.mark.backend_free

PHONE = 390


@pytest.mark.parametrize("path", ["/inbox/", "/insight/", "/settings/notifications/"])
def test_the_header_wraps_rather_than_pushing_its_controls_off_a_phone(browser, site, path):
    # Staff see the most links (Webhooks, Admin): one line of them put Notifications and Log out past 700 px.
    person = Reviewer(browser, site, "reviewer", "countersign")
    try:
        person.page.set_viewport_size({"width": PHONE, "height": 800})
        page = person.open(path)
        header = page.locator("header.topbar")
        controls = header.locator("a, button")
        assert controls.count() >= 10
        for n in range(controls.count()):
            box = controls.nth(n).bounding_box()
            assert box and box["x"] >= 0 and box["x"] + box["width"] <= PHONE, (controls.nth(n).inner_text(), box)
        assert page.evaluate("document.querySelector('header.topbar').scrollWidth") <= PHONE
    finally:
        person.close()


def test_a_touch_screen_is_not_offered_keyboard_shortcuts(browser, site):
    phone = Reviewer(browser, site, "reviewer", "countersign", viewport={"width": PHONE, "height": 844},
                     has_touch=True, is_mobile=True)
    laptop = Reviewer(browser, site, "reviewer", "countersign")
    try:
        assert phone.open("/inbox/").get_by_role("button", name="Keyboard shortcuts (?)").is_hidden()
        assert laptop.open("/inbox/").get_by_role("button", name="Keyboard shortcuts (?)").is_visible()
    finally:
        phone.close()
        laptop.close()
