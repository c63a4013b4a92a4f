"""Media stimuli on the rater's side (annotation.media, annotation.media_views): the page's
player with a signed URL on both loop paths, the file served only to the rater holding the slot
(with HTTP ranges), the listening log, and the study's rules held by the server (hear it to the
end first, most plays)."""

from __future__ import annotations

import datetime as dt
import re
import time
from pathlib import Path

import pytest
from django.core import signing
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from annotation.media import media_token
from annotation.models import Judgment, ListeningLog
from annotation.monitor_selectors import progress_rows, study_monitor
from evalstudy.media import item_media_upload
from evalstudy.models import AssignmentSlot, Item, ItemMedia, Study
from evalstudy.services import study_open
from tests.factories import invite, make_study
from tests.media_files import write_tone

HX = {"HTTP_HX_REQUEST": "true"}
GOOD = {"severity": "0", "usable": "yes"}
MAX_STATEMENTS = 6  # tests/annotation/test_rater_loop.py: media cost the loop nothing


def audio_study(tmp_path: Path, **settings) -> Study:
    """Two items with a one-second tone each, two systems, opened."""
    stored_audio = make_study(n_items=2, n_systems=2, **settings)
    tone = write_tone(tmp_path / "tone.wav", seconds=1.0)
    for item in Item.objects.filter(study=stored_audio):
        with open(tone, "rb") as stream:
            item_media_upload(item=item, upload=stream, name="tone.wav")
    study_open(study=stored_audio)
    stored_audio.refresh_from_db()
    return stored_audio


def enter(client: Client, stored_audio: Study) -> str:
    """A personal-link rater in `client`, through the practice item; returns the first target
    item's page (served by the loop's fast path)."""
    rater = invite(stored_audio)
    client.get(reverse("annotation:enter", args=[rater.access_token]))
    page = client.get(reverse("annotation:rate", args=[stored_audio.slug])).content.decode()
    action = re.search(r'<form[^>]*action="([^"]+)"', page).group(1)
    client.post(action, GOOD, **HX)
    return client.get(reverse("annotation:rate", args=[stored_audio.slug])).content.decode()


def slot_of(page: str) -> int:
    return int(re.search(r'action="/s/[^"]+/slots/(\d+)/"', page).group(1))


def media_url(page: str) -> str:
    return re.search(r'<audio[^>]* src="([^"]+)"', page).group(1)


def log_url(page: str) -> str:
    return re.search(r'data-log-url="([^"]+)"', page).group(1)


@pytest.fixture
def stored_audio(db, media_root, tmp_path):
    return audio_study(tmp_path)


def test_the_page_plays_the_items_audio_through_a_url_that_names_nothing(stored_audio):
    client = Client()
    page = enter(client, stored_audio)
    url = media_url(page)
    assert url.startswith("/m/") and 'class="media-controls"' in page
    for secret in ("sys-", "item-", "tone", "evalstudy-media", ".wav"):
        assert secret not in url
    assert "player.js" in page and "<kbd>p</kbd>" in page
    # The htmx swap (the next item after a submission) carries its own player too.
    response = client.post(f"/s/{stored_audio.slug}/slots/{slot_of(page)}/", GOOD, **HX)
    swapped = response.content.decode()
    assert "<audio" in swapped and media_url(swapped) != url


def test_a_submission_with_media_still_fits_the_loops_statement_budget(stored_audio):
    client = Client()
    page = enter(client, stored_audio)
    with CaptureQueriesContext(connection) as queries:
        response = client.post(f"/s/{stored_audio.slug}/slots/{slot_of(page)}/", GOOD, **HX)
    assert response.status_code == 200 and "<audio" in response.content.decode()
    assert len(queries) <= MAX_STATEMENTS, [q["sql"][:80] for q in queries]


def test_the_holder_gets_the_file_and_byte_ranges_with_private_headers(stored_audio):
    client = Client()
    url = media_url(enter(client, stored_audio))
    media = ItemMedia.objects.first()
    data = media.file.read()
    whole = client.get(url)
    assert whole.status_code == 200 and b"".join(whole.streaming_content) == data
    assert whole["Content-Type"] == "audio/wav" and whole["Accept-Ranges"] == "bytes"
    assert whole["Cache-Control"].startswith("private")
    assert whole["X-Content-Type-Options"] == "nosniff"
    assert whole["Content-Disposition"] == "inline"  # no file name
    part = client.get(url, HTTP_RANGE="bytes=100-199")
    assert part.status_code == 206 and part["Content-Range"] == f"bytes 100-199/{len(data)}"
    assert b"".join(part.streaming_content) == data[100:200] and part["Content-Length"] == "100"
    tail = client.get(url, HTTP_RANGE="bytes=-10")
    assert b"".join(tail.streaming_content) == data[-10:]
    assert client.get(url, HTTP_RANGE=f"bytes={len(data)}-").status_code == 416


def test_another_rater_anonymous_a_tampered_or_expired_link_and_another_slot_are_refused(
        stored_audio, monkeypatch):
    mine, theirs = Client(), Client()
    page = enter(mine, stored_audio)
    other_page = enter(theirs, stored_audio)
    url = media_url(page)
    assert theirs.get(url).status_code == 403  # another rater's session
    assert Client().get(url).status_code == 403  # nobody's
    token = url.removeprefix("/m/")
    tampered = token[:-3] + ("AAA" if not token.endswith("AAA") else "BBB")
    assert mine.get(f"/m/{tampered}").status_code == 403
    # A token signed for the other rater's slot (a leaked link) opens nothing for me ...
    assert mine.get(media_url(other_page)).status_code == 403
    # ... nor does one naming my own rater with their slot, or media my slot does not have.
    me = AssignmentSlot.objects.get(pk=slot_of(page)).assignment.rater_id
    their_slot = slot_of(other_page)
    forged = media_token(slot_id=their_slot, rater_id=me, which="item")
    assert mine.get(reverse("annotation:media", args=[forged])).status_code == 404
    absent = media_token(slot_id=slot_of(page), rater_id=me, which="a")
    assert mine.get(reverse("annotation:media", args=[absent])).status_code == 404
    # An hour later the link has expired.
    later = time.time() + 3601
    monkeypatch.setattr(signing.time, "time", lambda: later)
    assert mine.get(url).status_code == 403


def test_a_closed_study_serves_no_media(stored_audio):
    client = Client()
    url = media_url(enter(client, stored_audio))
    Study.objects.filter(pk=stored_audio.pk).update(status=Study.Status.CLOSED)
    assert client.get(url).status_code == 404


# --- the listening log --------------------------------------------------------------------------
def report(client: Client, url: str, **fields):
    data = {"plays": "0", "seeks": "0", "intervals": "[]", **fields}
    return client.post(url, data)


def backdate(slot_id: int, seconds: float) -> None:
    ListeningLog.objects.filter(slot_id=slot_id).update(
        started_at=timezone.now() - dt.timedelta(seconds=seconds))


def test_the_log_keeps_running_totals_and_the_union_of_what_was_played(stored_audio):
    client = Client()
    page = enter(client, stored_audio)
    url, slot_id = log_url(page), slot_of(page)
    assert report(client, url, plays="1").json()["plays"] == 1
    backdate(slot_id, 30)
    answer = report(client, url, plays="1", seeks="1", intervals="[[0, 0.4], [0.2, 0.6]]")
    assert answer.status_code == 200
    assert answer.json()["seconds_listened"] == pytest.approx(0.6)
    # A repeat, a late report with lower totals, a replay of the same stretch: nothing added.
    report(client, url, plays="2", seeks="1", intervals="[[0, 0.6]]")
    report(client, url, plays="1", seeks="0", intervals="[[0.1, 0.3]]")
    log = ListeningLog.objects.get(slot_id=slot_id)
    assert (log.plays, log.seeks, log.seconds_listened, log.completed) == (2, 1, 0.6, False)
    # What is past the end of the file does not count.
    report(client, url, plays="2", intervals="[[0.6, 5.0]]")
    log.refresh_from_db()
    assert log.seconds_listened == pytest.approx(1.0) and log.completed


def test_more_listening_than_time_passed_is_refused_until_time_has_passed(stored_audio):
    client = Client()
    page = enter(client, stored_audio)
    url, slot_id = log_url(page), slot_of(page)
    report(client, url, plays="1")
    ListeningLog.objects.filter(slot_id=slot_id).update(duration_s=60)  # a long file
    refused = report(client, url, plays="1", intervals="[[0, 60]]")
    assert refused.status_code == 409 and not refused.json()["accepted"]
    assert ListeningLog.objects.get(slot_id=slot_id).seconds_listened == 0
    backdate(slot_id, 61)
    assert report(client, url, plays="1", intervals="[[0, 60]]").json()["completed"]


@pytest.mark.parametrize("fields", [
    {"plays": "-1"}, {"plays": "x"}, {"seeks": "99999999999"},
    {"intervals": "not json"}, {"intervals": "[[1]]"}, {"intervals": "[[2, 1]]"},
    {"intervals": '[["a", 1]]'}, {"intervals": "[[0, 1e999]]"},
    {"intervals": "[" + ",".join(["[0, 1]"] * 201) + "]"},
])
def test_a_malformed_or_oversized_report_is_refused(stored_audio, fields):
    client = Client()
    page = enter(client, stored_audio)
    assert report(client, log_url(page), **fields).status_code == 400
    assert not ListeningLog.objects.exists()


def test_only_the_rater_holding_the_slot_reports_and_only_with_the_csrf_token(stored_audio):
    browser = Client()
    page = enter(browser, stored_audio)
    mine = Client(enforce_csrf_checks=True)  # the same session, CSRF checked as in a browser
    mine.cookies = browser.cookies
    url = log_url(page)
    assert report(mine, url, plays="1").status_code == 403  # no CSRF token
    token = re.search(r'name="csrfmiddlewaretoken" value="([^"]+)"', page).group(1)
    assert mine.post(url, {"plays": "1"}, HTTP_X_CSRFTOKEN=token).status_code == 200
    other = Client()
    enter(other, stored_audio)
    assert report(other, url, plays="5").status_code == 404
    assert report(Client(), url, plays="5").status_code == 404
    assert ListeningLog.objects.get().plays == 1


def test_max_plays_is_held_by_the_log(db, media_root, tmp_path):
    stored_audio = audio_study(tmp_path, media_max_plays=2)
    client = Client()
    page = enter(client, stored_audio)
    assert "You may play it 2 times." in page and 'data-max-plays="2"' in page
    url = log_url(page)
    assert report(client, url, plays="2").status_code == 200
    refused = report(client, url, plays="3")
    assert refused.status_code == 409 and refused.json()["max_plays"] == 2
    assert "as many times as this study allows" in refused.json()["message"]
    assert ListeningLog.objects.get().plays == 2
    # The page shown again says how many were used.
    again = client.get(reverse("annotation:rate", args=[stored_audio.slug])).content.decode()
    assert 'data-plays="2"' in again


def test_must_finish_is_held_by_the_server_on_both_paths(db, media_root, tmp_path):
    stored_audio = audio_study(tmp_path, media_must_finish=True, language="fr")
    client = Client()
    page = enter(client, stored_audio)
    slot_id = slot_of(page)
    assert 'data-must-finish="true"' in page
    early = client.post(f"/s/{stored_audio.slug}/slots/{slot_id}/", GOOD, **HX)
    assert early.status_code == 409
    assert "Veuillez écouter" in early.content.decode()  # in the study's language
    assert not Judgment.objects.filter(slot_id=slot_id).exists()
    url = log_url(page)
    report(client, url, plays="1")
    backdate(slot_id, 5)
    report(client, url, plays="1", intervals="[[0, 0.5]]")  # half of it
    assert client.post(f"/s/{stored_audio.slug}/slots/{slot_id}/", GOOD, **HX).status_code == 409
    assert report(client, url, plays="1", intervals="[[0.5, 1.0]]").json()["completed"]
    with CaptureQueriesContext(connection) as queries:
        done = client.post(f"/s/{stored_audio.slug}/slots/{slot_id}/", GOOD, **HX)
    assert done.status_code == 200 and len(queries) <= MAX_STATEMENTS
    assert Judgment.objects.filter(slot_id=slot_id).count() == 2
    # The general path (the rater API) holds the rule too.
    from annotation.services import SubmissionRefused, judgment_submit

    slot = AssignmentSlot.objects.get(pk=slot_of(done.content.decode()))
    with pytest.raises(SubmissionRefused, match="écouter"):
        from django.utils import translation

        with translation.override("fr"):
            judgment_submit(rater=slot.assignment.rater, slot_id=slot.pk, answers=GOOD)


def test_the_monitor_shows_who_listened(stored_audio):
    client = Client()
    page = enter(client, stored_audio)
    url, slot_id = log_url(page), slot_of(page)
    report(client, url, plays="1")
    backdate(slot_id, 10)
    report(client, url, plays="1", intervals="[[0, 1.0]]")
    client.post(f"/s/{stored_audio.slug}/slots/{slot_id}/", GOOD, **HX)
    row = next(r for r in study_monitor(stored_audio).raters if r.done)
    assert (row.media_items, row.media_heard_to_end) == (1, 1)
    assert row.median_seconds_listened == pytest.approx(1.0)
    csv_row = next(r for r in progress_rows(study_monitor(stored_audio)) if r["media_items"])
    assert csv_row["median_seconds_listened"] == "1.0"


def test_the_analysis_sees_listening_and_can_leave_out_what_was_not_heard(
        db, media_root, tmp_path):
    """The tidy judgments carry seconds heard and whether each slot's recording was heard to
    the end; `exclude_unheard` leaves out judgments of recordings not heard through."""
    from analysis.selectors import JudgmentFilter, judgments_tidy
    from annotation.services import judgment_submit
    from evalstudy.services import assignment_next

    stored_audio = audio_study(tmp_path)
    rater = invite(stored_audio)
    targets = []
    while (slot := assignment_next(study=stored_audio, rater=rater)) is not None:
        if slot.kind == "target":
            targets.append(slot)
            if len(targets) == 1:  # the first recording heard through, the second not at all
                ListeningLog.objects.create(
                    slot=slot, which="item", duration_s=1.0, plays=1, seconds_listened=1.0,
                    intervals=[[0.0, 1.0]], completed=True, started_at=timezone.now(),
                    updated_at=timezone.now())
        judgment_submit(rater=rater, slot_id=slot.pk, answers=GOOD)
    frame = judgments_tidy(stored_audio)
    by_slot = frame.drop_duplicates("slot").set_index("slot")
    assert bool(by_slot.loc[targets[0].pk, "media_heard"]) is True
    assert by_slot.loc[targets[0].pk, "seconds_listened"] == 1.0
    assert bool(by_slot.loc[targets[1].pk, "media_heard"]) is False
    assert by_slot.loc[targets[1].pk, "seconds_listened"] == 0.0
    kept = judgments_tidy(stored_audio, JudgmentFilter(exclude_unheard=True))
    assert set(kept["slot"]) == {targets[0].pk}
    assert "judgments of media not heard to the end excluded" in JudgmentFilter(
        exclude_unheard=True).describe()
