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


def _po_messages(path: Path) -> dict[str, str]:
    """msgid -> msgstr of a .po file (the header left out)."""
    def text(block: str) -> str:
        parts = re.findall(r'"((?:[^"\\]|\\.)*)"', block)
        return "".join(parts).replace('\\"', '"').replace("\\n", "\n").replace("\\\\", "\\")

    messages = {}
    for entry in path.read_text(encoding="utf-8").split("\nmsgid ")[1:]:
        msgid, _, msgstr = entry.partition("\nmsgstr ")
        if text(msgid):
            messages[text(msgid)] = text(msgstr)
    return messages


def test_the_languages_offered_are_the_languages_translated():
    assert [code for code, _ in settings.LANGUAGES] == list(RATER_LANGUAGES)
    assert settings.LANGUAGE_CODE == "en"


@pytest.mark.parametrize("language", [code for code in RATER_LANGUAGES if code != "en"])
def test_every_message_is_translated_and_compiled(language):
    po = LOCALE / language / "LC_MESSAGES" / "django.po"
    messages = _po_messages(po)
    assert len(messages) >= 45
    assert [msgid for msgid, msgstr in messages.items() if not msgstr] == []
    # The compiled catalogue (what Django reads) says the same as the source.
    with (po.with_suffix(".mo")).open("rb") as compiled:
        catalogue = gettext.GNUTranslations(compiled)
    assert {msgid: catalogue.gettext(msgid) for msgid in messages} == messages
    for msgid, msgstr in messages.items():  # placeholders survive translation
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
    page = _enter(Client(), english)  # same thread, next request
    assert '<html lang="en"' in page and "Submit" in page and "Envoyer" not in page
    login = Client().get(reverse("login"))
    assert login["Content-Language"] == "en"


@pytest.mark.django_db
def test_the_fast_loop_renders_each_languages_questions_once():
    from annotation import loop

    loop.questions_html.cache_clear()
    for language, word in (("fr", "Oui"), ("es", "Sí"), ("en", "Yes")):
        study = make_study(n_items=1, n_systems=1, language=language)
        study_open(study=study)
        assert word in _enter(Client(), study)
