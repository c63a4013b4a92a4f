"""The rater interface in the study's language: English, French and Spanish, complete; the
study's own texts as written; the language never leaks into the next request."""

from __future__ import annotations

import gettext
import re
from pathlib import Path

import pytest
from django.conf import settings
from django.test import Client
from django.urls import reverse

from evalstudy.models import Study
from evalstudy.services import study_open
from evalstudy.spec.errors import SpecInvalid
from evalstudy.spec.fields import RATER_LANGUAGES
from evalstudy.spec.study import parse_study_spec
from tests.factories import UserFactory, invite, make_study, token_client

LOCALE = Path(__file__).resolve().parents[1] / "locale"
HX = {"HTTP_HX_REQUEST": "true"}


def _po_messages(path: Path) -> dict[tuple[str | None, str], str]:
    """(context, msgid) -> msgstr of a .po file (the header left out)."""
    def text(block: str) -> str:
        parts = re.findall(r'"((?:[^"\\]|\\.)*)"', block)
        return "".join(parts).replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")

    messages = {}
    for entry in path.read_text(encoding="utf-8").split("\n\n"):
        found = re.search(r'^(?:msgctxt ((?:".*"\n)+))?msgid ((?:".*"\n)+)msgstr ((?:".*"\n?)+)',
                          entry, re.M)
        if found and text(found.group(2)):
            context = text(found.group(1)) if found.group(1) else None
            messages[(context, text(found.group(2)))] = text(found.group(3))
    return messages


def test_the_languages_offered_are_the_languages_translated():
    assert [code for code, _ in settings.LANGUAGES] == list(RATER_LANGUAGES)
    assert settings.LANGUAGE_CODE == "en"


@pytest.mark.parametrize("language", [code for code in RATER_LANGUAGES if code != "en"])
def test_every_message_is_translated_and_compiled(language):
    po = LOCALE / language / "LC_MESSAGES" / "django.po"
    messages = _po_messages(po)
    assert len(messages) >= 45
    assert [key for key, msgstr in messages.items() if not msgstr] == []
    assert "#, fuzzy" not in po.read_text(encoding="utf-8")  # a guess is not a translation
    # The compiled catalogue (what Django reads) says the same as the source.
    with (po.with_suffix(".mo")).open("rb") as compiled:
        catalogue = gettext.GNUTranslations(compiled)
    assert {(context, msgid): catalogue.pgettext(context, msgid) if context
            else catalogue.gettext(msgid) for context, msgid in messages} == messages
    for (_, msgid), msgstr in messages.items():  # placeholders survive translation
        assert set(re.findall(r"%\(\w+\)s", msgid)) == set(re.findall(r"%\(\w+\)s", msgstr))


def test_a_spec_picks_the_language_and_an_unknown_one_is_located():
    spec = ("study:\n  slug: fr-study\n  title: Étude\n  language: fr\nsystems:\n  - name: a\n"
            "criteria:\n  - {key: usable, kind: binary, prompt: Utilisable ?}\n"
            "items:\n  - {id: i1, reference: r, outputs: {a: x}}\n")
    assert parse_study_spec(spec, "s.yaml").settings["language"] == "fr"
    with pytest.raises(SpecInvalid) as caught:
        parse_study_spec(spec.replace("language: fr", "language: de"), "s.yaml")
    [error] = caught.value.errors
    assert (error.line, error.path) == (4, "study.language")
    assert error.message == "'de' is not one of en, fr, es"


@pytest.mark.django_db
def test_the_api_sets_the_language_and_refuses_an_unknown_one():
    owner = UserFactory(is_staff=True)
    study = make_study(n_items=1, n_systems=1, owner=owner)
    api = token_client(owner)
    url = reverse("api-study", args=[study.slug])
    refused = api.patch(url, data={"language": "xx"}, content_type="application/json")
    assert refused.status_code == 400 and "language" in refused.content.decode()
    assert api.patch(url, data={"language": "es"},
                     content_type="application/json").json()["language"] == "es"
    assert Study.objects.get(pk=study.pk).language == "es"


def _enter(client: Client, study: Study) -> str:
    client.get(reverse("annotation:enter", args=[invite(study).access_token]))
    return client.get(reverse("annotation:rate", args=[study.slug])).content.decode()


def _action(page: str) -> str:
    return re.search(r'<form[^>]*action="(/s/[^"]+/slots/\d+/)"', page).group(1)


@pytest.mark.django_db
@pytest.mark.parametrize("fast", [True, False])
def test_a_french_study_speaks_french_to_its_raters_on_every_path(fast, monkeypatch):
    if not fast:
        monkeypatch.setattr("annotation.loop.fast_path_available", lambda: False)
    study = make_study(n_items=2, n_systems=2, language="fr",
                       instructions="Judge the **transcript**.")
    study_open(study=study)
    client = Client()
    client.get(reverse("annotation:enter", args=[invite(study).access_token]))
    instructions = client.get(reverse("annotation:rate", args=[study.slug]), follow=True)
    assert "Commencer" in instructions.content.decode()
    client.post(reverse("annotation:instructions", args=[study.slug]))
    page = client.get(reverse("annotation:rate", args=[study.slug])).content.decode()
    assert '<html lang="fr" dir="ltr">' in page  # the practice item
    for french in ("Élément d’entraînement", "Consignes", "Envoyer", "Oui", "Non",
                   "Sens entièrement préservé", "Référence", "Sortie", "obligatoire"):
        assert french in page, french
    assert "Judge the <strong>transcript</strong>." in page  # the researcher's words as written
    for english in (">Submit", "Practice item", "Meaning fully preserved", ">Yes<"):
        assert english not in page, english
    # An answer missing: the error in French (the general path answers it).
    response = client.post(_action(page), {"severity": "0"}, **HX)
    assert response.status_code == 400
    assert "une réponse est requise" in response.content.decode()
    response = client.post(_action(page), {"severity": "0", "usable": "yes"}, **HX)
    feedback = client.get(response["HX-Redirect"]).content.decode()
    assert "Élément d’entraînement : retour" in feedback and "Continuer" in feedback
    item = client.get(reverse("annotation:rate", args=[study.slug])).content.decode()
    assert "Élément 2 sur 3" in item and "élément 2 sur 3" in item  # announcement, title
    answered = client.post(_action(item), {"severity": "0", "usable": "yes"}, **HX)
    if fast:  # the next item swapped in, in French
        following = answered.content.decode()
        assert "<title>" in following and "Élément 3 sur 3" in following
    else:  # the general path sends the browser to it
        following = client.get(answered["HX-Redirect"]).content.decode()
    assert "Envoyer" in following
    done = client.post(_action(following), {"severity": "0", "usable": "yes"}, **HX)
    end = client.get(done["HX-Redirect"]).content.decode()
    assert "Vous avez terminé tous les éléments. Merci !" in end


@pytest.mark.django_db
def test_the_language_of_one_study_never_reaches_the_next_request():
    french = make_study(n_items=1, n_systems=1, language="fr")
    english = make_study(n_items=1, n_systems=1)
    for study in (french, english):
        study_open(study=study)
    assert "Envoyer" in _enter(Client(), french)
    login = Client().get(reverse("login"))  # same thread, next request: no study involved
    assert login["Content-Language"] == "en" and '<html lang="en"' in login.content.decode()
    page = _enter(Client(), english)
    assert '<html lang="en"' in page and "Submit" in page and "Envoyer" not in page


@pytest.mark.django_db
def test_the_fast_loop_renders_a_studys_questions_once_per_language():
    from annotation import loop

    study = make_study(n_items=4, n_systems=1, language="es")
    study_open(study=study)
    client = Client()
    practice = _enter(client, study)  # the first page claims the seat: the general path
    client.post(_action(practice), {"severity": "0", "usable": "yes"}, **HX)
    loop._questions_html.cache_clear()
    page = client.get(reverse("annotation:rate", args=[study.slug])).content.decode()
    assert "Sí" in page and loop._questions_html.cache_info().misses == 1
    page = client.post(_action(page), {"severity": "0", "usable": "yes"}, **HX).content.decode()
    assert "Sí" in page and loop._questions_html.cache_info().hits == 1  # the same questions
    Study.objects.filter(pk=study.pk).update(language="fr")  # same criteria, another language
    page = client.post(_action(page), {"severity": "0", "usable": "yes"}, **HX).content.decode()
    assert "Oui" in page and "Sí" not in page
    assert loop._questions_html.cache_info().misses == 2


@pytest.mark.django_db
def test_refusals_and_missing_pages_are_told_in_the_studys_language():
    study = make_study(n_items=1, n_systems=1, language="fr")
    study_open(study=study)
    refused = Client().get(reverse("annotation:crowd_entry", args=[study.slug]))
    assert refused.status_code == 400
    assert "identifiant de participant valide" in refused.content.decode()
    client = Client()
    _enter(client, study)
    missing = client.get(reverse("annotation:slot", args=[study.slug, 999_999]))
    assert missing.status_code == 404
    body = missing.content.decode()
    assert '<html lang="fr"' in body and "Page introuvable" in body


@pytest.mark.django_db
def test_a_study_with_no_free_place_says_so_in_its_language_without_its_name():
    study = make_study(n_items=1, n_systems=1, language="es")
    study_open(study=study)
    _enter(Client(), study)  # the only seat is taken
    page = _enter(Client(), study)
    assert "Todas las plazas de este estudio están ocupadas" in page
    assert study.slug not in page.split("<main", 1)[1]


@pytest.mark.django_db
def test_pairwise_choices_and_feedback_use_the_studys_names_for_a_and_b():
    study = make_study(n_items=2, n_systems=2, design="pairwise", language="fr",
                       rater_labels={"output_a": "Gauche", "output_b": "Droite"})
    study_open(study=study)
    client = Client()
    page = _enter(client, study)
    assert "Gauche est meilleur" in page and "Droite est meilleur" in page
    assert "A est meilleur" not in page


def test_every_text_marked_in_the_code_is_in_the_catalogues(tmp_path):
    """makemessages, run on a copy of the project, finds no message the catalogues lack: a
    rater text added to a template or the code without its translations fails here, not in
    front of a French rater. (A copy: makemessages writes into the catalogues it reads.)"""
    import os
    import shutil
    import subprocess
    import sys

    if shutil.which("xgettext") is None:
        pytest.fail("xgettext not found: apt-get install gettext")
    root = LOCALE.parent
    for name in ("manage.py", "config", "kit", "evalstudy", "annotation", "metrics", "proxies",
                 "analysis", "templates", "locale"):
        source = root / name
        if source.is_dir():
            shutil.copytree(source, tmp_path / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.mo"))
        else:
            shutil.copy(source, tmp_path / name)
    done = subprocess.run(
        [sys.executable, "manage.py", "makemessages", *[f"--locale={code}" for code in
                                                        RATER_LANGUAGES[1:]],
         "--no-location", "--verbosity=0"],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "config.settings"})
    assert done.returncode == 0, done.stderr
    for language in RATER_LANGUAGES[1:]:
        fresh = _po_messages(tmp_path / "locale" / language / "LC_MESSAGES" / "django.po")
        missing = sorted(msgid for (_, msgid), msgstr in fresh.items() if not msgstr)
        assert missing == [], f"{language}: untranslated {missing}"
