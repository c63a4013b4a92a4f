"""Error spans and a slider in the browser, in a French interface: a seat completed with the
keyboard (words chosen with the arrow keys, marked with M) and with the mouse (words
dragged over), an overlap refused, a span removed, an untouched slider refused by the server,
every page checked by axe-core, and what was stored read back against the text shown."""

from __future__ import annotations

import json
import re

import pytest
from playwright.sync_api import expect

from annotation.models import Judgment
from evalstudy.models import Criterion, Item, Output, Study, System
from evalstudy.services import study_open
from tests.browser.test_accessibility_browser import assert_accessible
from tests.browser.test_rater_browser import PID, _submit

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def esa_study(**settings) -> Study:
    study = Study.objects.create(**{
        "slug": "esa-browser", "title": "ESA browser", "design": "latin_square",
        "ratings_per_output": 1, "language": "fr", "reference_shown": False,
        "consent_text": "J'accepte.", "instructions": "Marquez les erreurs, puis notez.",
        "completion_code": "ESA0K42", "screen_out_code": "ESAOUT", "crowd_platform": "prolific",
        **settings})
    systems = [System.objects.create(study=study, name=f"secret-mt-{k}") for k in "ab"]
    texts = [("Le chat dort.", "The cat sleep on the mat today", "The cat sleeps on the mat"),
             ("Il pleut.", "It rain very much outside", "It is raining outside"),
             ("Merci.", "Thanks you a lot", "Thank you very much")]
    for index, (source, text_a, text_b) in enumerate(texts):
        item = Item.objects.create(study=study, external_id=f"s{index}", context=source)
        # An emoji first: offsets are characters (code points) on both sides, not the
        # browser's UTF-16 units, so the spans after it land on the words marked.
        Output.objects.create(item=item, system=systems[0], text=f"🙂 {text_a}")
        Output.objects.create(item=item, system=systems[1], text=f"😀 {text_b}")
    Criterion.objects.create(study=study, key="errors", kind="span", order=0,
                             prompt="Marquez chaque erreur", options=["Accuracy", "Fluency"])
    Criterion.objects.create(study=study, key="quality", kind="slider", order=1,
                             prompt="Qualité globale ?", labels={"0": "absurde", "100": "parfait"})
    return study_open(study=study)


def _mark_with_keyboard(page, *, words: int, severity: str, category: str) -> None:
    """Second word onwards, `words` words, marked with the keyboard only."""
    pane = page.locator('[data-span-pane="output"]')
    # answers.js (deferred) has split the text into words: keys pressed before go nowhere.
    expect(pane.locator(".tok").first).to_be_visible()
    pane.focus()
    page.keyboard.press("ArrowRight")
    for _ in range(words - 1):
        page.keyboard.press("Shift+ArrowRight")
    page.keyboard.press("m")
    category_select = page.locator("[data-span-category]")
    expect(category_select).to_be_focused()
    category_select.select_option(category)
    page.keyboard.press("Tab")
    page.locator("[data-span-severity]").select_option(severity)
    page.keyboard.press("Tab")
    expect(page.get_by_role("button", name="Ajouter l’erreur")).to_be_focused()
    page.keyboard.press("Enter")
    expect(pane).to_be_focused()


def _drag_over(page, first: int, last: int) -> None:
    tokens = page.locator('[data-span-pane="output"] .tok')
    start, end = tokens.nth(first).bounding_box(), tokens.nth(last).bounding_box()
    page.mouse.move(start["x"] + 1, start["y"] + start["height"] / 2)
    page.mouse.down()
    page.mouse.move(end["x"] + end["width"] - 1, end["y"] + end["height"] / 2, steps=4)
    page.mouse.up()


def test_a_seat_with_error_spans_and_a_slider_in_french(live_server, new_page, shot):
    study = esa_study()
    page = new_page()
    page.goto(f"{live_server.url}/c/{study.slug}/?PROLIFIC_PID={PID}")
    page.get_by_role("button", name="J’accepte et je souhaite participer").click()
    page.get_by_role("button", name=re.compile("Commencer")).click()

    # Item 1: the keyboard only. One span, then an overlapping one refused.
    expect(page.get_by_text("Aucune erreur marquée.")).to_be_visible()
    _mark_with_keyboard(page, words=2, severity="major", category="Fluency")
    expect(page.locator("[data-span-list] li")).to_have_count(1)
    expect(page.locator("[data-span-list] li")).to_contain_text("Fluency, majeure")
    expect(page.get_by_text("Aucune erreur marquée.")).to_be_hidden()
    page.keyboard.press("m")  # the same two words again
    expect(page.get_by_role("alert")).to_contain_text("chevauche")
    expect(page.get_by_role("button", name="Ajouter l’erreur")).to_be_disabled()
    page.keyboard.press("Escape")
    # The untouched slider is no answer: the server says so, in French, and stores nothing.
    response = _submit(page, page.get_by_role("button", name=re.compile("Envoyer")).click)
    assert response.status == 400
    expect(page.get_by_text("une réponse est requise")).to_be_visible()
    assert not Judgment.objects.exists()
    assert_accessible(page, "an item with spans and a slider, with an error")
    # The marking survived the refusal (the page came back with the answer posted).
    expect(page.locator("[data-span-list] li")).to_have_count(1)
    slider = page.locator('input[type="range"]')
    slider.focus()
    for _ in range(3):
        page.keyboard.press("ArrowRight")
    expect(page.locator('input[name="quality"]')).to_have_value("53")
    shot(page, "16-french-spans-and-slider")
    first_text = page.locator('[data-span-pane="output"] p').inner_text()
    _submit(page, page.get_by_role("button", name=re.compile("Envoyer")).click)

    # Item 2: the mouse. Two spans dragged over; the first removed again; a typed score.
    expect(page.locator("#rate-form")).to_be_visible()
    _drag_over(page, 0, 1)
    page.locator("[data-span-severity]").select_option("minor")
    page.get_by_role("button", name="Ajouter l’erreur").click()
    _drag_over(page, 3, 3)
    page.locator("[data-span-category]").select_option("Accuracy")
    page.locator("[data-span-severity]").select_option("critical")
    page.get_by_role("button", name="Ajouter l’erreur").click()
    expect(page.locator("[data-span-list] li")).to_have_count(2)
    page.locator("[data-span-list] li").first.get_by_role("button", name="Retirer").click()
    expect(page.locator("[data-span-list] li")).to_have_count(1)
    page.locator('input[name="quality"]').fill("20")
    assert_accessible(page, "an item with a span marked with the mouse")
    second_text = page.locator('[data-span-pane="output"] p').inner_text()
    _submit(page, page.get_by_role("button", name=re.compile("Envoyer")).click)

    # Item 3: nothing wrong: no span, a high score.
    page.locator('input[name="quality"]').fill("95")
    _submit(page, page.get_by_role("button", name=re.compile("Envoyer")).click)
    expect(page.get_by_text("Vous avez terminé tous les éléments. Merci !")).to_be_visible()

    stored = {}
    for judgment in Judgment.objects.select_related("slot__output", "criterion"):
        stored.setdefault(judgment.slot.output.text, {})[judgment.criterion.key] = judgment
    assert set(stored) == {first_text, second_text} | (set(stored) - {first_text, second_text})
    first = json.loads(stored[first_text]["errors"].value)["spans"]
    words = first_text.split()
    assert [first_text[s["start"]:s["end"]] for s in first] == [" ".join(words[1:3])]
    assert (first[0]["category"], first[0]["severity"]) == ("Fluency", "major")
    assert stored[first_text]["errors"].numeric_value == 5.0
    assert stored[first_text]["quality"].value == "53"
    second = json.loads(stored[second_text]["errors"].value)["spans"]
    assert [(second_text[s["start"]:s["end"]], s["severity"]) for s in second] == [
        (second_text.split()[3], "critical")]
    assert stored[second_text]["quality"].value == "20"
    third = [texts for texts in stored if texts not in (first_text, second_text)]
    assert len(third) == 1 and json.loads(stored[third[0]]["errors"].value)["spans"] == []
    assert stored[third[0]]["quality"].numeric_value == 95.0


def _tuple_study(design: str, n_systems: int) -> Study:
    study = Study.objects.create(
        slug=f"{design.replace('_', '-')}-browser", title=design, design=design,
        ratings_per_output=1, language="fr", reference_shown=False,
        consent_text="J'accepte.", instructions="Classez les sorties.", crowd_platform="prolific",
        crowd_no_codes=True)
    systems = [System.objects.create(study=study, name=f"secret-{k}") for k in range(n_systems)]
    for index in range(2):
        item = Item.objects.create(study=study, external_id=f"q{index}",
                                   context=f"Question {index}")
        for k, system in enumerate(systems):
            Output.objects.create(item=item, system=system, text=f"Réponse {index}-{k}")
    Criterion.objects.create(study=study, key="choice", kind=design, prompt="Votre avis ?")
    return study_open(study=study)


def test_a_ranking_seat_and_a_best_worst_seat_in_french(live_server, new_page, shot):
    """Ranks given with the keyboard and the mouse (a rank taken from another output moves),
    best and worst chosen, the systems never shown, what was stored read back."""
    ranking = _tuple_study("ranking", 3)
    page = new_page()
    page.goto(f"{live_server.url}/c/{ranking.slug}/?PROLIFIC_PID={PID}")
    page.get_by_role("button", name="J’accepte et je souhaite participer").click()
    page.get_by_role("button", name=re.compile("Commencer")).click()
    expect(page.locator(".tuple .text.output")).to_have_count(3)
    assert "secret-" not in page.content()
    page.get_by_label("A : rang 1").check()
    page.get_by_label("B : rang 1").check()  # takes rank 1 from A
    expect(page.get_by_label("A : rang 1")).not_to_be_checked()
    page.get_by_label("A : rang 3").focus()
    page.keyboard.press("Space")
    page.get_by_label("C : rang 2").check()
    assert_accessible(page, "a ranking item")
    shot(page, "17-french-ranking")
    _submit(page, page.get_by_role("button", name=re.compile("Envoyer")).click)
    first = Judgment.objects.get()
    assert first.value == "B>C>A"
    page.get_by_label("A : rang 2").check()
    page.get_by_label("B : rang 2").check()
    response = _submit(page, page.get_by_role("button", name=re.compile("Envoyer")).click)
    assert response.status == 400  # C has no rank, A lost its own
    expect(page.get_by_text("donnez à chaque sortie un rang différent")).to_be_visible()
    page.get_by_label("A : rang 1").check()
    page.get_by_label("C : rang 3").check()
    _submit(page, page.get_by_role("button", name=re.compile("Envoyer")).click)
    expect(page.get_by_text("Vous avez terminé tous les éléments. Merci !")).to_be_visible()

    best_worst = _tuple_study("best_worst", 4)
    page = new_page()
    page.goto(f"{live_server.url}/c/{best_worst.slug}/?PROLIFIC_PID={PID}")
    page.get_by_role("button", name="J’accepte et je souhaite participer").click()
    page.get_by_role("button", name=re.compile("Commencer")).click()
    expect(page.locator(".tuple .text.output")).to_have_count(4)
    best = page.get_by_role("group", name="Meilleure")
    worst = page.get_by_role("group", name="Pire")
    best.get_by_label("C").check()
    worst.get_by_label("C").check()  # the same output cannot be both
    expect(best.get_by_label("C")).not_to_be_checked()
    best.get_by_label("A").check()
    assert_accessible(page, "a best-worst item")
    shot(page, "18-french-best-worst")
    _submit(page, page.get_by_role("button", name=re.compile("Envoyer")).click)
    stored = Judgment.objects.filter(criterion__study=best_worst).get()
    assert stored.value == "best=A;worst=C"
