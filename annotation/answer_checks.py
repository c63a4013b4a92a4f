"""The checks of a rater's answers to one slot, as plain data (no Django): which questions are
shown given the other answers, which of them must be answered, and each answer's canonical
value as its criterion's kind reads it. Both storage strategies of
`annotation.services.judgment_submit` (the general one and the loop's fast SQL one) check a
submission here, so they cannot disagree on what a rater may submit.

Also what a submission comes to (`StoreCounts`) and how it is refused (`SubmissionRefused`,
`SubmissionInvalid`), which both strategies report the same way.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from evalstudy.criteria import CriterionRule, ShownText, gettext_noop

Translate = Callable[[str], str]


def untranslated(text: str) -> str:
    return text


class SubmissionRefused(Exception):
    """The post is not allowed at all (not the rater's slot, not the current slot, closed).
    `status`: the HTTP status an interface answers with."""

    def __init__(self, message: str, *, status: int = 403):
        super().__init__(message)
        self.status = status


class SubmissionInvalid(Exception):
    """Some answers are missing or invalid; `errors` maps criterion key -> reason."""

    def __init__(self, errors: dict[str, str]):
        super().__init__("; ".join(f"{key}: {reason}" for key, reason in errors.items()))
        self.errors = errors


@dataclass
class StoreCounts:
    created: int = 0
    revised: int = 0
    unchanged: int = 0
    removed: int = 0
    slot_kind: str = ""
    # the rater was stopped by this submission (attention-check limit, calibration pass mark)
    stopped: bool = False
    # What the rater is shown next when the storage strategy served it with the answer (the
    # loop's fast strategy: an `annotation.loop.LoopPage`); None when the caller finds it.
    served: Any = None


class Parent(Protocol):
    @property
    def key(self) -> str: ...


class AskedQuestion(Protocol):
    """What the checks read of a criterion (evalstudy.models.Criterion, or the loop's copy of
    it built from its row)."""

    @property
    def key(self) -> str: ...
    @property
    def required(self) -> bool: ...
    @property
    def show_if_criterion(self) -> Parent | None: ...
    @property
    def rule(self) -> CriterionRule: ...

    def shown_for(self, answers: dict[str, str]) -> bool: ...


@dataclass(frozen=True)
class CheckedAnswers:
    """The canonical answers of the questions shown (criterion key -> value) and why the
    others were refused (criterion key -> reason, in the rater's language)."""

    answers: dict[str, str]
    errors: dict[str, str]


def answer_posted(question: AskedQuestion, posted: Mapping[str, Any]) -> object:
    """A criterion's answer as posted, gathered from the form fields its kind posts (a ranking
    posts one rank per output shown, `key__A=2`, `key__B=1`, ...: the form works without
    JavaScript). The rule checks what comes out."""
    return question.rule.spec.collect(question.key, posted)


def answers_checked(questions: Iterable[AskedQuestion],
                    posted: Mapping[str, Any], shown: ShownText | None = None, *,
                    translate: Translate = untranslated) -> CheckedAnswers:
    """The canonical values of the questions that are shown, and the refusals.

    A conditional question counts only when its condition holds on the other answers; then it
    is required if it says so. Hidden questions are dropped even when posted. `shown`: the
    texts of the slot as the rater saw them, which some kinds' answers are read against.
    `questions` in display order: a condition names an earlier question; one that names a
    later one (or a cycle) is never met, so the question would never be shown, and were all
    hidden an empty post would complete the slot: refused (SubmissionRefused, 409). Study
    files and opening a study refuse such questions, but rows can change after: fail closed.
    """
    answers: dict[str, str] = {}
    errors: dict[str, str] = {}
    earlier: set[str] = set()
    for question in questions:
        parent = question.show_if_criterion
        if parent is not None and parent.key not in earlier:
            raise SubmissionRefused(translate(gettext_noop(
                "This study's questions are misconfigured (a question depends on a later one); "
                "please tell the researcher.")), status=409)
        earlier.add(question.key)
        if not question.shown_for(answers):
            continue
        value = answer_posted(question, posted)
        if value is None or (isinstance(value, str) and value.strip() == ""):
            if question.required:
                errors[question.key] = translate(gettext_noop("an answer is required"))
            continue
        rule = question.rule
        try:
            answers[question.key] = rule.normalise(value, shown)
        except ValueError as error:
            # What to do instead, as the kind words it (the rule's own reason names values a
            # rater never typed).
            errors[question.key] = rule.spec.answer_error(rule, error, translate)
    return CheckedAnswers(answers, errors)
