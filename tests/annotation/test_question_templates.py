"""Each answer kind has its own question template on the rater's page
(templates/annotation/questions/<kind>.html, named by the kind), and what the page shares
between kinds (the question list, the keyboard script) names none of them."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.template.loader import get_template

from annotation.selectors import question_of
from evalstudy.criteria import KINDS, all_kinds
from evalstudy.models import Criterion

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("kind", all_kinds(), ids=lambda kind: kind.name)
def test_every_kind_names_a_template_that_exists(kind):
    assert kind.template == f"annotation/questions/{kind.name}.html"
    get_template(kind.template)  # raises TemplateDoesNotExist


def test_the_question_list_and_the_keyboard_name_no_kind():
    shared = [ROOT / "templates/annotation/_questions.html", ROOT / "static/js/rate.js"]
    for path in shared:
        text = path.read_text(encoding="utf-8")
        # (an HTML <span> is not the kind)
        named = [kind for kind in KINDS if re.search(rf"(?<![</])\b{kind}\b", text)]
        assert named == [], (path.name, named)
    assert "{% elif" not in shared[0].read_text(encoding="utf-8")


def test_a_question_takes_its_keys_from_its_kind():
    usable = Criterion(kind="binary", key="usable", prompt="Usable?")
    preference = Criterion(kind="pairwise", key="pref", prompt="Better?", allow_tie=True)
    assert [(c.value, c.key) for c in question_of(usable, ("A", "B")).choices] == [
        ("yes", "y"), ("no", "n")]
    assert [c.key for c in question_of(preference, ("A", "B")).choices] == ["a", "b", "t"]
    assert question_of(preference, ("A", "B")).template == "annotation/questions/pairwise.html"
