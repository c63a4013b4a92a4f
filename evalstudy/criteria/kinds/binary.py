"""Binary: "yes" or "no" (also read from y/n, true/false, 1/0)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .base import AnswerKind, ChoiceView, Translate, gettext_noop, not_one_of, untranslated

if TYPE_CHECKING:
    from ..rule import CriterionRule

_YES = {"yes", "y", "true", "1"}
_NO = {"no", "n", "false", "0"}


class Binary(AnswerKind):
    name = "binary"
    label = "Yes / no"
    order = 20
    description = "Yes or no."
    level = "nominal"
    score = "binary"
    model = "glmm"
    analysis = ("binomial", "agreement", "ceiling", "binary_validity")

    def choices(self, rule: CriterionRule) -> list[str]:
        return ["yes", "no"]

    def parse(self, rule: CriterionRule, text: str) -> str:
        lowered = text.lower()
        if lowered in _YES:
            return "yes"
        if lowered in _NO:
            return "no"
        raise not_one_of(text, self.choices(rule))

    def binary(self, value: str) -> float | None:
        return {"yes": 1.0, "no": 0.0}.get(value)

    def categories(self, rule: CriterionRule) -> list[Any] | None:
        return ["yes", "no"]

    def binary_value(self, preserved: bool) -> str:
        return "yes" if preserved else "no"

    def choice_views(self, rule: CriterionRule, sides: tuple[str, str],
                     translate: Translate = untranslated) -> list[ChoiceView] | None:
        return [ChoiceView("yes", translate(gettext_noop("Yes")), "y"),
                ChoiceView("no", translate(gettext_noop("No")), "n")]


KIND = Binary()
