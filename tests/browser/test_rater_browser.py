"""The rater's browser, for real: Chromium through the whole crowd journey, keyboard only,
resuming, a 375 px screen, an XSS payload, and the researcher's live monitor."""

import re

import pytest
from django.utils import timezone
from playwright.sync_api import expect

from annotation.models import Judgment
from evalstudy.models import (
    AttentionCheck,
    CalibrationItem,
    Criterion,
    Enrollment,
    Item,
    Output,
    Study,
    System,
)
from evalstudy.services import study_open
from tests.factories import UserFactory

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
PID = "60a1b2c3d4e5f60718293a4b"
NO_JS_PID = "60a1b2c3d4e5f60718293a4c"  # another Prolific id (24 hex characters)


def every_kind_study(**settings) -> Study:
    """A Latin-square study with every criterion kind but pairwise, a conditional question,
    a practice item and an attention check after every 2 items."""
    fields = {
        "slug": "browser-study", "title": "Browser study", "design": "latin_square",
        "ratings_per_output": 1, "attention_check_every": 2, "attention_fail_limit": 3,
        "consent_text": "I agree to take part in this study.",
        "instructions": "Judge each transcript against what was **said**.",
        "completion_code": "BRW0K42", "completion_url": "", "screen_out_code": "BRWOUT",
        "crowd_platform": "prolific",
    }
    study = Study.objects.create(**{**fields, **settings})
    a = System.objects.create(study=study, name="secret-system-a")
    b = System.objects.create(study=study, name="secret-system-b")
    texts = [("turn on the light", "turn on the light", "turn of the light"),
             ("call my sister", "call my sister", "all my sister"),
             ("set an alarm for seven", "set an alarm for eleven", "set an alarm for seven"),
             ("what is the weather", "what is the weather", "what is whether")]
    for index, (reference, text_a, text_b) in enumerate(texts):
        item = Item.objects.create(study=study, external_id=f"i{index}", reference=reference)
        Output.objects.create(item=item, system=a, text=text_a)
        Output.objects.create(item=item, system=b, text=text_b)
    severity = Criterion.objects.create(study=study, key="severity", kind="severity", order=0,
                                        prompt="How much meaning is preserved?")
    Criterion.objects.create(study=study, key="usable", kind="binary", order=1,
                             prompt="Is it usable?")
    Criterion.objects.create(study=study, key="fluency", kind="likert", order=2, scale_points=5,
                             labels={"1": "very poor", "5": "excellent"},
                             prompt="How fluent is it?")
    Criterion.objects.create(study=study, key="error_type", kind="categorical", order=3,
                             options=["none", "word", "meaning"], prompt="Main error type?")
    Criterion.objects.create(study=study, key="note", kind="text", order=4, required=True,
                             prompt="What went wrong?", show_if_criterion=severity,
                             show_if_values=["2"])
    expected_good = {"severity": "0", "usable": "yes", "fluency": "5", "error_type": "none"}
    CalibrationItem.objects.create(study=study, key="c1", reference="open the door",
                                   text="open the door", expected=expected_good,
                                   feedback="The transcript is identical to what was said.")
    AttentionCheck.objects.create(study=study, key="a1", reference="good morning",
                                  text="purple elephant accordion",
                                  expected={"severity": "2"})
    return study_open(study=study)


def _progress(page):
    return page.locator(".progress span").inner_text()


def _submit(page, press):
    """Submit the current item with `press()` and wait for what follows: the next item swapped
    in place (htmx, no page load), a page load (`HX-Redirect`: feedback, the end), or the
    same item with its errors (400). Returns the submission's response."""
    old = page.locator("#rate-form").get_attribute("action")
    page.evaluate("window.__beforeSubmit = true")  # gone once another document is loaded
    with page.expect_response(lambda r: r.request.method == "POST" and "/slots/" in r.url
                              ) as answered:
        press()
    response = answered.value
    # Every submission from the rating page is htmx's: a plain form post (a page load) would
    # mean the form was swapped in but not yet wired up when the rater pressed Enter.
    assert response.request.headers.get("hx-request") == "true", "a plain form post"
    if response.headers.get("hx-redirect"):
        # Re-run across the page load: true only in the new document, once it is loaded.
        page.wait_for_function(
            "() => !window.__beforeSubmit && document.readyState === 'complete'")
    elif response.status == 200:
        expect(page.locator("#rate-form")).not_to_have_attribute("action", old)
    return response


def _answer_item_with_mouse(page, *, attention: bool):
    if attention:
        page.locator('input[name="severity"][value="2"]').check()
        note = page.locator('textarea[name="note"]')
        # expect() retries: rate.js (deferred) may still be loading right after a navigation.
        expect(note, "the conditional question appears when its condition holds").to_be_visible()
        note.fill("nonsense words")
        page.locator('input[name="usable"][value="no"]').check()
    else:
        page.locator('input[name="severity"][value="0"]').check()
        expect(page.locator('textarea[name="note"]')).to_be_hidden()
        page.locator('input[name="usable"][value="yes"]').check()
    page.locator('input[name="fluency"][value="4"]').check()
    page.locator('input[name="error_type"][value="word"]').check()
    _submit(page, page.get_by_role("button", name=re.compile("Submit")).click)


def test_crowd_journey_from_entry_url_to_completion_code(live_server, new_page, shot):
    study = every_kind_study()
    page = new_page()
    page.goto(f"{live_server.url}/c/{study.slug}/?PROLIFIC_PID={PID}&STUDY_ID=s1&SESSION_ID=x1")
    assert "I agree to take part" in page.content()
    shot(page, "01-consent")
    page.get_by_role("button", name="I agree and want to take part").click()
    assert page.get_by_role("heading", name="Instructions").is_visible()
    shot(page, "02-instructions")
    page.get_by_role("button", name=re.compile("Start")).click()

    # practice item, answered wrongly on purpose: feedback shows the expected answers
    assert "Practice item" in page.content()
    shot(page, "03-calibration")
    page.get_by_label("Meaning mostly preserved (minor errors)").check()
    page.locator('input[name="usable"][value="yes"]').check()
    page.locator('input[name="fluency"][value="5"]').check()
    page.locator('input[name="error_type"][value="none"]').check()
    # a required conditional question is not required while hidden
    _submit(page, page.get_by_role("button", name=re.compile("Submit")).click)
    assert "Some of your answers differ" in page.content()
    assert "The transcript is identical" in page.content()
    shot(page, "04-feedback")
    page.get_by_role("link", name=re.compile("Continue")).click()

    # a required question left empty: the page says so and keeps the answers
    page.locator('input[name="severity"][value="0"]').check()
    assert _submit(page, page.get_by_role("button", name=re.compile("Submit")).click
                   ).status == 400
    expect(page.locator(".error").first).to_be_visible()
    assert page.locator('input[name="severity"][value="0"]').is_checked()
    shot(page, "05-validation-error")

    seen_attention = False
    for _ in range(12):
        if "completion code" in page.content():
            break
        attention = "purple elephant accordion" in page.content()
        seen_attention |= attention
        if attention:
            shot(page, "06-attention-check")
        else:
            shot(page, "07-item")
        _answer_item_with_mouse(page, attention=attention)
    assert seen_attention
    assert page.locator("#completion-code").inner_text() == "BRW0K42"
    shot(page, "08-completion")
    for name in ("secret-system-a", "secret-system-b"):
        assert name not in page.content()
    rater_judgments = Judgment.objects.filter(rater__external_id=PID)
    # calibration (4) + 2 items x 4 + 2 items x 4 + 2 checks x 5 (note shown)
    assert rater_judgments.filter(criterion__key="note").count() == 2
    assert Enrollment.objects.get(rater__external_id=PID).consented_at is not None
    timings = rater_judgments.exclude(served_at=None).values_list("served_at", "submitted_at")
    assert timings and all(served <= submitted for served, submitted in timings)


def test_keyboard_only_run(live_server, new_page, shot):
    study = every_kind_study()
    page = new_page()
    page.goto(f"{live_server.url}/c/{study.slug}/?PROLIFIC_PID={PID}")
    with page.expect_navigation():
        page.keyboard.press("Enter")  # "I agree" has the focus
    assert "/instructions/" in page.url
    with page.expect_navigation():
        page.keyboard.press("Enter")
    for _ in range(14):
        page.wait_for_load_state()
        content = page.content()
        if "completion code" in content:
            break
        if "/feedback/" in page.url:
            with page.expect_navigation():
                page.keyboard.press("Enter")
            continue
        attention = "purple elephant accordion" in content
        page.keyboard.press("2" if attention else "0")
        if attention:
            page.locator('textarea[name="note"]').focus()
            page.keyboard.type("garbage")
            page.keyboard.press("Tab")
        page.keyboard.press("n" if attention else "y")
        page.keyboard.press("4")  # goes to the first unanswered question offering "4"
        page.keyboard.press("1")  # categorical option 1
        _submit(page, lambda: page.keyboard.press("Enter"))
    assert page.locator("#completion-code").inner_text() == "BRW0K42"
    values = dict(Judgment.objects.filter(
        rater__external_id=PID, slot__kind="target"
    ).values_list("criterion__key", "value").distinct())
    assert values["fluency"] == "4" and values["usable"] == "yes"
    assert values["error_type"] == "none"
    shot(page, "09-keyboard-done")


def test_enter_pressed_the_moment_an_item_arrives_stays_one_round_trip(live_server, new_page):
    """htmx wires up swapped-in content when it settles, by default 20 ms after the swap: a
    rater's Enter inside that window used to post the new form as a plain page load."""
    study = every_kind_study(consent_text="", instructions="")
    page = new_page()
    page.goto(f"{live_server.url}/c/{study.slug}/?PROLIFIC_PID={PID}")
    _answer_item_with_mouse(page, attention=False)  # practice item
    page.get_by_role("link", name=re.compile("Continue")).click()
    posts = []
    page.on("request", lambda r: posts.append(r) if r.method == "POST" else None)
    # The first answer is swapped in; the next task after the swap presses Enter on the new,
    # unanswered item, as a key already held down would.
    page.evaluate("""() => document.addEventListener("htmx:afterSwap", () => setTimeout(() => {
        document.dispatchEvent(new KeyboardEvent("keydown", {key: "Enter", bubbles: true}));
    }, 0), {once: true})""")
    _answer_item_with_mouse(page, attention="purple elephant" in page.content())
    expect(page.locator(".errors, .error").first).to_be_visible()  # the unanswered item's errors
    assert len(posts) == 2
    assert [post.headers.get("hx-request") for post in posts] == ["true", "true"]
    assert "/c/" not in page.url and page.locator("#rate-form").count() == 1


def test_resumed_session_continues_where_it_left(live_server, new_page):
    study = every_kind_study(instructions="")
    first = new_page()
    first.goto(f"{live_server.url}/c/{study.slug}/?PROLIFIC_PID={PID}")
    first.get_by_role("button", name="I agree and want to take part").click()
    # practice item + feedback, then one item
    _answer_item_with_mouse(first, attention=False)
    first.get_by_role("link", name=re.compile("Continue")).click()
    _answer_item_with_mouse(first, attention="purple elephant" in first.content())
    before = _progress(first)
    first.context.close()

    again = new_page()  # a new browser profile: no cookies
    again.goto(f"{live_server.url}/c/{study.slug}/?PROLIFIC_PID={PID}")
    assert _progress(again) == before
    assert before.startswith("3 of")


def test_375px_screen_and_xss_payload_shown_as_text(live_server, new_page, shot):
    study = every_kind_study(consent_text="", instructions="")
    payload = '<img src=x onerror="window.__xss=1"><script>window.__xss=2</script>'
    Output.objects.filter(item__study=study).update(text=payload)
    page = new_page(width=375, height=740)
    page.goto(f"{live_server.url}/c/{study.slug}/?PROLIFIC_PID={PID}")
    _answer_item_with_mouse(page, attention=False)  # practice item
    page.get_by_role("link", name=re.compile("Continue")).click()
    output = page.locator(".text.output p").first
    assert output.inner_text() == payload
    assert page.evaluate("window.__xss") is None
    assert page.evaluate("document.documentElement.scrollWidth") <= 375
    shot(page, "10-mobile-375px")


def test_monitor_updates_live(live_server, new_page, shot, client):
    study = every_kind_study()
    researcher = UserFactory(username="mon", is_staff=True)
    Study.objects.filter(pk=study.pk).update(owner=researcher)
    client.force_login(researcher)
    page = new_page()
    page.context.add_cookies([{
        "name": "sessionid", "value": client.cookies["sessionid"].value,
        "url": live_server.url,
    }])
    page.goto(f"{live_server.url}/monitor/{study.slug}/")
    assert "No rater has started yet." in page.content()
    assert page.evaluate("typeof htmx") == "object"
    shot(page, "11-monitor")
    rater_page = new_page()
    rater_page.goto(f"{live_server.url}/c/{study.slug}/?PROLIFIC_PID={PID}")
    rater_page.get_by_role("button", name="I agree and want to take part").click()
    rater_page.get_by_role("button", name=re.compile("Start")).click()  # claims a seat
    page.wait_for_selector(f"text={PID}", timeout=15_000)  # htmx polls every 5 s
    assert Enrollment.objects.get().entered_at <= timezone.now()


def test_pairwise_outputs_side_by_side_with_a_b_keys(live_server, new_page, shot):
    from tests.factories import invite, make_study

    study = make_study(n_items=2, n_systems=2, design="pairwise", status=Study.Status.OPEN)
    rater = invite(study)
    page = new_page()
    page.goto(f"{live_server.url}/enter/{rater.access_token}/")
    page.goto(f"{live_server.url}/s/{study.slug}/")
    page.keyboard.press("a")  # practice item: A expected
    _submit(page, lambda: page.keyboard.press("Enter"))
    assert "Your answers match the expected answers" in page.content()
    with page.expect_navigation():
        page.keyboard.press("Enter")
    boxes = page.locator(".pair .output")
    assert boxes.count() == 2
    assert [boxes.nth(i).locator("h2").inner_text() for i in range(2)] == ["A", "B"]
    left, right = (boxes.nth(i).bounding_box() for i in range(2))
    assert left["x"] < right["x"] and abs(left["y"] - right["y"]) < 2, "side by side"
    shot(page, "12-pairwise")
    slot_id = int(re.search(r"/slots/(\d+)/", page.locator("#rate-form").get_attribute(
        "action")).group(1))
    page.keyboard.press("b")
    _submit(page, lambda: page.keyboard.press("Enter"))
    stored = Judgment.objects.get(slot_id=slot_id, criterion__key="preference")
    assert stored.value == "B"
    assert stored.slot.output_id is not None and stored.slot.output_b_id is not None
    for name in ("sys-0", "sys-1"):
        assert name not in page.content()


def _requests_while(page, action):
    """The requests the page makes while `action` runs and the next item settles."""
    made = []

    def record(request):
        made.append(request)

    page.on("request", record)
    action()
    page.remove_listener("request", record)
    return [(r.method, re.sub(r"\d+", "N", r.url.split("//", 1)[1].split("/", 1)[1]))
            for r in made]


def test_an_answer_is_one_round_trip_and_the_page_works_without_javascript(
        live_server, new_page, shot):
    study = every_kind_study(consent_text="", instructions="", attention_check_every=0)
    page = new_page()
    page.goto(f"{live_server.url}/c/{study.slug}/?PROLIFIC_PID={PID}")
    _answer_item_with_mouse(page, attention=False)  # practice item, then its feedback
    page.get_by_role("link", name=re.compile("Continue")).click()
    assert _progress(page) == "2 of 5"
    made = _requests_while(page, lambda: _answer_item_with_mouse(page, attention=False))
    # One POST answered with the next item: no redirect, no second request, no page load.
    assert made == [("POST", f"s/{study.slug}/slots/N/")]
    assert _progress(page) == "3 of 5"
    assert page.title().endswith("item 3 of 5")
    assert page.locator("#item-announcer").inner_text() == "Item 3 of 5"
    shot(page, "13-item-after-one-round-trip")
    # The keyboard still drives the swapped-in item.
    page.keyboard.press("0")
    expect(page.locator('input[name="severity"][value="0"]')).to_be_checked()

    plain = new_page(javascript=False)
    plain.goto(f"{live_server.url}/c/{study.slug}/?PROLIFIC_PID={NO_JS_PID}")
    for _ in range(2):  # the practice item and its feedback, then a first item
        _answer_item_with_mouse_no_js(plain)
        if "/feedback/" in plain.url:
            plain.get_by_role("link", name=re.compile("Continue")).click()
    assert _progress(plain) == "3 of 5"
    assert Judgment.objects.filter(rater__external_id=NO_JS_PID,
                                   slot__kind="target").count() == 4


def _answer_item_with_mouse_no_js(page):
    page.locator('input[name="severity"][value="0"]').check()
    page.locator('input[name="usable"][value="yes"]').check()
    page.locator('input[name="fluency"][value="4"]').check()
    page.locator('input[name="error_type"][value="word"]').check()
    with page.expect_navigation():  # without JavaScript: a POST, a redirect, the next page
        page.get_by_role("button", name=re.compile("Submit")).click()


def test_a_seat_in_french_with_a_right_to_left_output(live_server, new_page, shot):
    """The whole journey in a French interface; an Arabic transcript reads right to left
    inside it; the researcher's own texts stay as written."""
    study = every_kind_study(language="fr", alignment_shown=True)
    Output.objects.filter(item__external_id="i0").update(text="شغل الضوء")
    page = new_page()
    page.goto(f"{live_server.url}/c/{study.slug}/?PROLIFIC_PID={PID}")
    expect(page.locator("html")).to_have_attribute("lang", "fr")
    page.get_by_role("button", name="J’accepte et je souhaite participer").click()
    page.get_by_role("button", name=re.compile("Commencer")).click()
    expect(page.get_by_text("Élément d’entraînement : vous verrez ensuite")).to_be_visible()
    assert page.get_by_text("How much meaning is preserved?").is_visible()  # as written
    seen_arabic = False
    for _ in range(14):
        if "/feedback/" in page.url:
            expect(page.get_by_role("heading", name="Élément d’entraînement : retour")
                   ).to_be_visible()
            page.get_by_role("link", name=re.compile("Continuer")).click()
            continue
        if page.locator("#rate-form").count() == 0:
            break
        arabic = page.locator(".text.output p", has_text="شغل الضوء")
        if arabic.count():
            seen_arabic = True
            assert arabic.evaluate("e => getComputedStyle(e).direction") == "rtl"
            shot(page, "13-french-rtl-output")
        elif page.locator(".alignment mark").count():
            shot(page, "15-french-alignment-shown")
        attention = "purple elephant" in page.content()
        page.locator(f'input[name="severity"][value="{2 if attention else 0}"]').check()
        if attention:
            page.locator('textarea[name="note"]').fill("sans rapport")
        page.get_by_label("Oui").check()
        page.locator('input[name="fluency"][value="4"]').check()
        page.locator('input[name="error_type"][value="none"]').check()
        _submit(page, page.get_by_role("button", name=re.compile("Envoyer")).click)
    assert seen_arabic
    expect(page.get_by_text("Vous avez terminé tous les éléments. Merci !")).to_be_visible()
    assert page.locator("#completion-code").inner_text() == "BRW0K42"
    shot(page, "14-french-done")
