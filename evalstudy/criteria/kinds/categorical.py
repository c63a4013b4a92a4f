"""Categorical: one of the criterion's options, spelled as configured (matched ignoring case)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import AnswerKind, not_one_of

if TYPE_CHECKING:
    from ..rule import CriterionRule


class Categorical(AnswerKind):
    name = "categorical"
    label = "Categorical"
    order = 50
    description = "One of the options you list (at least 2)."
    settings = ("options", "labels")
    level = "nominal"
    analysis = ("categories", "agreement", "ceiling")

    def choices(self, rule: CriterionRule) -> list[str]:
        return list(rule.options)

    def parse(self, rule: CriterionRule, text: str) -> str:
        for option in rule.options:
            if text == option or text.lower() == option.lower():
                return option
        raise not_one_of(text, self.choices(rule))

    def problems(self, rule: CriterionRule) -> list[str]:
        options = list(rule.options)
        problems = []
        if len(options) < 2:
            problems.append("categorical needs at least 2 options")
        if len({str(option).lower() for option in options}) != len(options):
            problems.append("categorical options must be distinct (ignoring case)")
        return problems


KIND = Categorical()
