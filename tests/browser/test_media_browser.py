"""Media stimuli in Chromium: a rater completes a seat whose items are speech recordings, in a
French interface, with the keyboard only. Submitting stays locked until each recording was
heard to the end (as the server's log says), and the log records the plays and the seconds
heard."""

import re

import pytest
from django.urls import reverse
from playwright.sync_api import expect

from annotation.models import Judgment, ListeningLog
from evalstudy.media import item_media_upload
from evalstudy.models import Item, ItemMedia, Study
from evalstudy.services import study_open
from tests.factories import invite, make_study
from tests.media_files import speech

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
SENTENCES = ("turn on the kitchen light", "call my sister after dinner")


@pytest.fixture
def listening_study(settings, tmp_path) -> Study:
    settings.MEDIA_ROOT = str(tmp_path / "stored")
    study = make_study(n_items=2, n_systems=2, slug="ecoute", language="fr",
                       media_must_finish=True, media_max_plays=3)
    for item, sentence in zip(Item.objects.filter(study=study).order_by("external_id"),
                              SENTENCES, strict=True):
        recording = speech(tmp_path / f"{item.external_id}.wav", sentence)
        with open(recording, "rb") as stream:
            item_media_upload(item=item, upload=stream, name=recording.name)
    study_open(study=study)
    return Study.objects.get(pk=study.pk)


def test_a_seat_with_audio_in_french_with_the_keyboard(live_server, new_page, shot,
                                                       listening_study):
    study = listening_study
    rater = invite(study)
    page = new_page()
    violations = []  # the media come from this site only (CSP media-src 'self')
    page.on("console", lambda msg: violations.append(msg.text)
            if "Content Security Policy" in msg.text else None)
    page.goto(live_server.url + reverse("annotation:enter", args=[rater.access_token]))
    # The practice item has no recording: answered with the keyboard as usual.
    expect(page.locator("#rate-form")).to_be_visible()
    page.keyboard.press("0")
    page.keyboard.press("y")
    with page.expect_response(lambda r: r.request.method == "POST"):
        page.keyboard.press("Enter")
    page.wait_for_url(re.compile(r"/feedback/$"))
    page.keyboard.press("Enter")  # the feedback page's one action: on to the first item
    page.wait_for_url(re.compile(r"/s/ecoute/$"))

    for number in range(2):
        player = page.locator(".media-player")
        expect(player).to_be_visible()
        audio = page.locator("audio.media-element")
        submit = page.locator('#rate-form button[type="submit"]')
        expect(submit, "locked until the recording was heard").to_be_disabled()
        expect(player.get_by_role("button", name=re.compile("Lire"))).to_be_visible()
        expect(player.get_by_role("button", name=re.compile("Réécouter depuis le début"))
               ).to_be_visible()
        expect(page.locator(".media-keys")).to_contain_text("Touches : p lire")
        if number == 0:
            shot(page, "20-media-locked-fr")
            # The slower speed is a key away, and pressed again it is normal speed.
            page.keyboard.press("s")
            assert audio.evaluate("a => a.playbackRate") == 0.75
            page.keyboard.press("s")
            assert audio.evaluate("a => a.playbackRate") == 1
        # Answers chosen before the end are kept; only submitting waits.
        page.keyboard.press("0")
        page.keyboard.press("y")
        page.locator("body").click(position={"x": 5, "y": 5})  # the focus off the radios
        page.keyboard.press("p")
        page.wait_for_function("() => !document.querySelector('audio.media-element').paused")
        if number == 0:
            shot(page, "20-media-playing-fr")
        page.wait_for_function("() => document.querySelector('audio.media-element').ended",
                               timeout=20_000)
        expect(submit, "unlocked once the server says it was heard to the end").to_be_enabled(
            timeout=15_000)
        expect(player.locator(".media-status")).to_contain_text("Écouté jusqu’à la fin")
        if number == 0:
            shot(page, "20-media-unlocked-fr")
        slot_id = int(re.search(r"/slots/(\d+)/", page.locator("#rate-form")
                                .get_attribute("action")).group(1))
        log = ListeningLog.objects.get(slot_id=slot_id, which="item")
        duration = ItemMedia.objects.get(item__outputs__slots=slot_id).duration_s
        assert log.plays == 1 and log.completed
        assert log.seconds_listened == pytest.approx(duration, abs=0.3)
        with page.expect_response(lambda r: r.request.method == "POST"
                                  and "/slots/" in r.url) as answered:
            page.keyboard.press("Enter")
        assert answered.value.status in (200, 302)
        assert Judgment.objects.filter(slot_id=slot_id).count() == 2
    expect(page.locator("body")).to_contain_text("Merci", timeout=10_000)
    shot(page, "20-media-done-fr")
    assert violations == []
