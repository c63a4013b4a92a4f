"""The answer checks both storage strategies of judgment_submit use (annotation.answer_checks),
on plain questions without a database: conditions, required answers, each kind's own form
fields and refusals, and a condition on a later question refused outright."""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from annotation.answer_checks import SubmissionRefused, answer_posted, answers_checked
from evalstudy.criteria import CriterionRule, ShownText


@dataclass
class Question:
    key: str
    rule: CriterionRule
    required: bool = True
    show_if_criterion: Question | None = None
    show_if_values: list[str] = field(default_factory=list)

    def shown_for(self, answers: dict[str, str]) -> bool:
        if self.show_if_criterion is None:
            return True
        return answers.get(self.show_if_criterion.key) in self.show_if_values


USABLE = Question("usable", CriterionRule("binary"))
WHY = Question("why", CriterionRule("text"), show_if_criterion=USABLE, show_if_values=["no"])
RANK = Question("rank", CriterionRule("ranking"))


def test_shown_questions_are_required_and_hidden_ones_dropped():
    checked = answers_checked([USABLE, WHY], {"usable": "yes", "why": "ignored"})
    assert checked.answers == {"usable": "yes"} and checked.errors == {}
    checked = answers_checked([USABLE, WHY], {"usable": "no"})
    assert checked.answers == {"usable": "no"}
    assert checked.errors == {"why": "an answer is required"}


def test_a_refused_answer_is_worded_by_its_kind_in_the_raters_language():
    french = {"choose one of: %(choices)s": "choisissez : %(choices)s"}
    checked = answers_checked([USABLE], {"usable": "maybe"},
                              translate=lambda text: french.get(text, text))
    assert checked.errors == {"usable": "choisissez : yes, no"}


def test_each_kind_collects_its_own_form_fields():
    posted = {"rank__A": "2", "rank__B": "1", "rank__C": "3"}
    assert answer_posted(RANK, posted) == "A=2;B=1;C=3"
    checked = answers_checked([RANK], posted, ShownText("text", n_outputs=3))
    assert checked.answers == {"rank": "B>A>C"} and checked.errors == {}
    tied = answers_checked([RANK], {"rank__A": "1", "rank__B": "1", "rank__C": "3"},
                           ShownText("text", n_outputs=3))
    assert tied.errors == {"rank": "give each output a different rank, from 1 (best) down"}


def test_a_condition_on_a_later_question_is_refused_not_skipped():
    with pytest.raises(SubmissionRefused) as refused:
        answers_checked([WHY, USABLE], {"usable": "no", "why": "garbled"})
    assert refused.value.status == 409 and "misconfigured" in str(refused.value)
