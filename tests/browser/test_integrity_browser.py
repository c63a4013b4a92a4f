"""The rating page really posts its integrity counters: a paste into a free-text answer, the
page losing the focus for a while and the keystrokes typed reach the server with the answer
and are stored per slot (annotation.models.SlotBehaviour)."""

import pytest

from annotation.models import Judgment, SlotBehaviour
from evalstudy.models import Study
from tests.factories import invite, make_study

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def test_paste_focus_loss_and_keystrokes_are_stored_with_the_answer(live_server, new_page,
                                                                    shot):
    study = make_study(n_items=3, n_systems=2, status=Study.Status.OPEN)
    rater = invite(study)
    page = new_page()
    page.context.grant_permissions(["clipboard-read", "clipboard-write"],
                                   origin=live_server.url)
    page.goto(f"{live_server.url}/enter/{rater.access_token}/")
    # the practice item
    page.locator('input[name="severity"][value="0"]').check()
    page.locator('input[name="usable"][value="yes"]').check()
    page.locator("#rate-form button[type=submit]").click()
    page.wait_for_url("**/feedback/")
    page.goto(f"{live_server.url}/s/{study.slug}/")
    page.locator("#rate-form").wait_for()
    page.locator('input[name="severity"][value="2"]').check()
    page.locator('input[name="usable"][value="no"]').check()
    note = page.locator('textarea[name="note"]')
    note.wait_for(state="visible")
    note.click()
    page.evaluate("navigator.clipboard.writeText('copied from somewhere else')")
    page.keyboard.press("Control+V")
    page.keyboard.type(" ok")  # three keystrokes
    # the rater leaves the page (another window takes the focus) and comes back
    page.evaluate("window.dispatchEvent(new Event('blur'))")
    page.wait_for_timeout(1600)
    page.evaluate("window.dispatchEvent(new Event('focus'))")
    shot(page, "integrity-pasted-note")
    slot_id = int(page.locator("#rate-form").get_attribute("action").rstrip("/").split("/")[-1])
    page.locator("#rate-form button[type=submit]").click()
    page.locator(f'#rate-form:not([action$="/{slot_id}/"])').wait_for()  # the next item
    assert Judgment.objects.get(slot_id=slot_id, criterion__key="note").value == (
        "copied from somewhere else ok")
    stored = SlotBehaviour.objects.get(slot_id=slot_id)
    assert stored.pastes == 1
    assert stored.focus_losses == 1 and stored.seconds_away in (1, 2)
    # Control and V are two keys pressed in the note, then " ok": three more
    assert stored.keystrokes == 5
    assert stored.inputs >= stored.keystrokes + 3  # and the clicks
