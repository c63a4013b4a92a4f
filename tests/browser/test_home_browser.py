"""A researcher's home in Chromium: the admin opens on their studies, a study opens from its
button, a refused open shows each problem in red with a link to its fix, and an entry link is
copied to the clipboard from the invite page; no Content Security Policy violation on the way.
Photographed at 1366 and 375 px (the home, the study's page, the invite page, the monitor)."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from evalstudy.models import Item, Rater, Study
from tests.browser.test_csp_browser import _watch
from tests.browser.test_researcher_browser import _assert_no_serious_violations
from tests.factories import UserFactory, make_study

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def _signed_in(new_page, client, live_server, user, width):
    client.force_login(user)
    page = new_page(width=width, height=800)
    page.context.add_cookies([{"name": "sessionid", "value": client.cookies["sessionid"].value,
                               "url": live_server.url}])
    page.context.grant_permissions(["clipboard-read", "clipboard-write"],
                                   origin=live_server.url)
    return page


def test_open_a_study_from_the_home_see_a_refusal_and_copy_a_link(live_server, new_page, shot,
                                                                  client):
    owner = UserFactory(username="home-browser", is_staff=True, is_superuser=True)
    ready = make_study(owner=owner, slug="ready", title="Ready to go")
    empty = make_study(owner=owner, slug="empty", title="Not yet")
    Item.objects.filter(study=empty).delete()
    page = _signed_in(new_page, client, live_server, owner, 1366)
    violations = _watch(page)
    base = live_server.url

    page.goto(f"{base}/admin/")
    expect(page.get_by_role("heading", name="Your studies")).to_be_visible()
    card = page.locator(f"#home-study-{ready.pk}").locator("xpath=ancestor::section")
    _assert_no_serious_violations(page, "home")
    shot(page, "40-home-1366")
    card.get_by_role("button", name="Open study").click()
    expect(page.locator(".messagelist .success")).to_contain_text("“Ready to go”: opened")
    expect(card.get_by_role("link", name="Invite raters")).to_be_visible()
    ready.refresh_from_db()
    assert ready.status == Study.Status.OPEN

    # A refused open, from the study's page: red messages only, each linked to its fix.
    page.goto(f"{base}/admin/evalstudy/study/{empty.pk}/change/")
    page.locator("#open-study").click()
    errors = page.locator(".messagelist .error")
    expect(errors.first).to_contain_text("“Not yet”: not opened (1 problem)")
    assert page.locator(".messagelist .success").count() == 0
    shot(page, "41-refused-open-1366")
    errors.get_by_role("link", name="Edit the items").click()
    expect(page).to_have_url(re.compile(rf"/admin/evalstudy/study/{empty.pk}/items-grid/$"))

    # The invite page: add a link, copy it.
    page.goto(f"{base}/admin/evalstudy/study/{ready.pk}/change/")
    page.get_by_role("link", name="Invite raters (entry links)").click()
    page.get_by_label("How many").fill("2")
    page.get_by_role("button", name="Add links").click()
    expect(page.locator(".messagelist .success")).to_contain_text("Added 2 personal links.")
    rater = Rater.objects.filter(study=ready, origin="invited").order_by("id").first()
    link = f"{base}/enter/{rater.access_token}/"
    page.get_by_role("button", name=f"Copy the link of {rater}").click()
    expect(page.locator(".copy-status").nth(1)).to_have_text("Copied")
    assert page.evaluate("navigator.clipboard.readText()") == link
    _assert_no_serious_violations(page, "invite page")
    shot(page, "42-invite-1366")
    assert violations == []

    # The same pages on a phone.
    phone = _signed_in(new_page, client, live_server, owner, 375)
    for url, name in ((f"{base}/admin/", "40-home-375"),
                      (f"{base}/admin/evalstudy/study/{ready.pk}/change/", "43-study-375"),
                      (f"{base}/admin/evalstudy/study/{ready.pk}/invite/", "42-invite-375"),
                      (f"{base}/monitor/{ready.slug}/", "44-monitor-375")):
        phone.goto(url)
        _assert_no_serious_violations(phone, f"{name} at 375 px")
        width = phone.evaluate("document.documentElement.scrollWidth")
        shot(phone, name)
        assert width <= 375 + 1, f"{name}: the page is {width} px wide"
    page.goto(f"{base}/admin/evalstudy/study/{ready.pk}/change/")
    shot(page, "43-study-1366")
    # The monitor has the Close button too.
    page.goto(f"{base}/monitor/{ready.slug}/")
    page.locator("#close-study").click()
    expect(page.locator(".messages .success")).to_contain_text("“Ready to go”: closed")
    expect(page.locator("#open-study")).to_have_text("Reopen study")
    shot(page, "44-monitor-1366")
