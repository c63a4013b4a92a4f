"""Free text: any string up to TEXT_MAX_LENGTH characters; counted, not modelled."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import AnswerKind, Translate, gettext_noop, plain_text, untranslated

if TYPE_CHECKING:
    from ..rule import CriterionRule, ShownText

MAX_LENGTH = 10_000


class FreeText(AnswerKind):
    name = "text"
    label = "Free text"
    order = 60
    description = "A free-text answer (comments, corrections); counted, not modelled."
    analysis = ("counted",)
    free_text = True

    def normalise(self, rule: CriterionRule, raw: object, shown: ShownText | None) -> str:
        text = plain_text(raw)
        if len(text) > MAX_LENGTH:
            raise ValueError(f"text longer than {MAX_LENGTH} characters")
        return text

    def answer_error(self, rule: CriterionRule, error: ValueError,
                     translate: Translate = untranslated) -> str:
        return (translate(gettext_noop("the answer is longer than %(limit)s characters"))
                % {"limit": MAX_LENGTH})


KIND = FreeText()
