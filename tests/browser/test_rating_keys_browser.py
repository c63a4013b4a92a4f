"""The rating page while the rater is faster than the network, in Chromium: keys typed while the
next item is on its way are held and given to that item (Enter then posts nothing), a server
message under a question goes once that question is answered, and an untouched slider looks
untouched (and is no answer) until it is moved. The next item is held back by a Playwright route
that lets the submission through only when the test says so: no test waits a set time."""

from __future__ import annotations

import re
from urllib.parse import parse_qs

import pytest
from playwright.sync_api import expect

from annotation.models import Judgment
from tests.browser.test_answer_kinds_browser import esa_study
from tests.browser.test_rater_browser import (
    PID,
    _answer_item_with_mouse,
    _submit,
    every_kind_study,
)

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
SLOTS = re.compile(r"/s/[\w-]+/slots/\d+/$")  # where the rating form posts its answers


def _first_item(page, live_server, study) -> None:
    """Through the practice item (answered with the mouse) to the study's first item."""
    page.goto(f"{live_server.url}/c/{study.slug}/?PROLIFIC_PID={PID}")
    _answer_item_with_mouse(page, attention=False)
    with page.expect_navigation(wait_until="load"):  # "load": the deferred scripts have run
        page.get_by_role("link", name=re.compile("Continue")).click()
    expect(page.locator("#rate-form")).to_be_visible()
    assert "purple elephant" not in page.content()  # the first check comes after 2 items


def _hold_submissions(page) -> list:
    """Submissions of the rating form are held (the route is kept, not answered) until the test
    lets each through with `route.continue_()`."""
    held: list = []

    def hold(route):
        if route.request.method == "POST":
            held.append(route)
        else:
            route.continue_()

    page.route(SLOTS, hold)
    return held


def _send_and_hold(page, held: list, press) -> None:
    """`press()` submits the form; returns once its request is held by the route."""
    try:
        with page.expect_request(lambda r: r.method == "POST" and SLOTS.search(r.url) is not None,
                                 timeout=30_000):  # a loaded machine may take a while
            press()
    except Exception as error:
        state = page.evaluate("""() => ({url: location.href, focus: document.activeElement &&
            document.activeElement.outerHTML.slice(0, 120), busy: (document.getElementById(
            "rate-form") || {getAttribute: () => "no form"}).getAttribute("aria-busy"),
            checked: Array.from(document.querySelectorAll("input:checked"), (i) => i.name)})""")
        raise AssertionError(f"the form was not submitted: {state}") from error
    for _ in range(400):
        if held:
            return
        page.wait_for_timeout(25)  # lets Playwright run the route handler; not a timing check
    raise AssertionError("the submission left the page but the route never held it")


def test_keys_typed_while_the_next_item_loads_answer_that_item(live_server, new_page):
    study = every_kind_study(consent_text="", instructions="")
    page = new_page()
    _first_item(page, live_server, study)
    for key in ("0", "y", "4", "1"):  # severity 0, usable yes, fluency 4, error type "none"
        page.keyboard.press(key)
    first_action = page.locator("#rate-form").get_attribute("action")
    held = _hold_submissions(page)
    _send_and_hold(page, held, lambda: page.keyboard.press("Enter"))
    # The next item is on its way: the rater goes on typing, then presses Enter.
    for key in ("1", "n", "5", "2"):  # severity 1, usable no, fluency 5, error type "word"
        page.keyboard.press(key)
    page.keyboard.press("Enter")
    assert len(held) == 1, "Enter pressed while the next item loaded posted a form"
    with page.expect_response(lambda r: r.request.method == "POST") as answered:
        held[0].continue_()
    assert answered.value.status == 200
    page.unroute(SLOTS)
    form = page.locator("#rate-form")
    expect(form).not_to_have_attribute("action", first_action)
    # The keys typed during the wait are the new item's answers; nothing was sent for it yet.
    expect(form.locator('input[name="severity"][value="1"]')).to_be_checked()
    expect(form.locator('input[name="usable"][value="no"]')).to_be_checked()
    expect(form.locator('input[name="fluency"][value="5"]')).to_be_checked()
    expect(form.locator('input[name="error_type"][value="word"]')).to_be_checked()
    expect(form.locator(".error")).to_have_count(0)
    first_slot = int(first_action.rstrip("/").rsplit("/", 1)[1])
    first = dict(Judgment.objects.filter(slot_id=first_slot)
                 .values_list("criterion__key", "value"))
    assert first == {"severity": "0", "usable": "yes", "fluency": "4", "error_type": "none"}
    second_action = form.get_attribute("action")
    assert _submit(page, lambda: page.keyboard.press("Enter")).status == 200
    second_slot = int(second_action.rstrip("/").rsplit("/", 1)[1])
    second = dict(Judgment.objects.filter(slot_id=second_slot)
                  .values_list("criterion__key", "value"))
    assert second == {"severity": "1", "usable": "no", "fluency": "5", "error_type": "word"}


def test_a_required_message_goes_once_its_question_is_answered(live_server, new_page):
    study = every_kind_study(consent_text="", instructions="")
    page = new_page()
    _first_item(page, live_server, study)
    assert _submit(page, lambda: page.keyboard.press("Enter")).status == 400
    messages = page.locator("#rate-form .question .error")
    expect(messages).to_have_count(4)  # severity, usable, fluency, error type
    page.keyboard.press("0")  # a shortcut answers severity
    expect(page.locator('.question[data-key="severity"] .error')).to_have_count(0)
    expect(messages).to_have_count(3)
    page.locator('input[name="usable"][value="yes"]').check()  # the mouse answers usable
    expect(page.locator('.question[data-key="usable"] .error')).to_have_count(0)
    expect(messages).to_have_count(2)
    # The others still say what is missing, and the server still checks: still refused.
    expect(page.locator('.question[data-key="fluency"] .error')).to_have_count(1)
    assert _submit(page, lambda: page.keyboard.press("Enter")).status == 400
    expect(messages).to_have_count(2)
    assert not Judgment.objects.filter(slot__kind="target").exists()


def test_an_untouched_slider_looks_untouched_and_is_no_answer_until_moved(live_server,
                                                                          new_page, shot):
    study = esa_study(language="en")
    page = new_page(width=1366, height=900)
    page.goto(f"{live_server.url}/c/{study.slug}/?PROLIFIC_PID={PID}")
    page.get_by_role("button", name="I agree and want to take part").click()
    with page.expect_navigation(wait_until="load"):  # "load": the deferred scripts have run
        page.get_by_role("button", name=re.compile("Start")).click()
    slider = page.locator('input[type="range"]')
    number = page.locator('input[name="quality"]')
    not_set = page.locator("[data-slider-unset]")

    def untouched():
        expect(slider).to_have_attribute("data-untouched", "")
        expect(not_set).to_be_visible()
        expect(not_set).to_have_text("Not set yet")
        expect(slider).to_have_attribute("aria-valuetext", "Not set yet")
        # The page draws a hollow handle on a bare track, not the browser's filled slider.
        assert slider.evaluate("e => getComputedStyle(e).appearance") == "none"

    def moved():
        expect(slider).not_to_have_attribute("data-untouched", "")
        expect(not_set).to_be_hidden()
        assert slider.get_attribute("aria-valuetext") is None
        assert slider.evaluate("e => getComputedStyle(e).appearance") != "none"

    untouched()
    assert slider.input_value() == "50"  # the handle stands in the middle, yet...
    shot(page, "50-slider-untouched")
    # ...the answer sent is empty, and the server refuses it, storing nothing.
    response = _submit(page, page.get_by_role("button", name=re.compile("Submit")).click)
    sent = parse_qs(response.request.post_data or "", keep_blank_values=True)
    assert response.status == 400 and sent["quality"] == [""]
    expect(page.locator('.question[data-key="quality"] .error')).to_have_count(1)
    assert not Judgment.objects.exists()
    untouched()  # the item came back with its error: still untouched
    slider.focus()
    page.keyboard.press("ArrowRight")
    moved()
    expect(number).to_have_value("51")
    expect(page.locator('.question[data-key="quality"] .error')).to_have_count(0)
    shot(page, "51-slider-moved")
    number.fill("")  # an empty number is no answer: the slider says so again
    untouched()
    number.fill("50")
    moved()
    expect(slider).to_have_value("50")
    assert _submit(page, page.get_by_role("button", name=re.compile("Submit")).click
                   ).status == 200
    assert Judgment.objects.get(criterion__key="quality").value == "50"
