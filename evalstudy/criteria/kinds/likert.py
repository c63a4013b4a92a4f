"""Likert: one of n ordered points, "1".."n" (2 to 11 points), with optional anchor labels."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .base import AnswerKind, ChoiceView, Translate, digit_key, untranslated

if TYPE_CHECKING:
    from ..rule import CriterionRule

MIN_POINTS = 2
MAX_POINTS = 11


class Likert(AnswerKind):
    name = "likert"
    label = "Likert scale"
    order = 10
    description = "One of 2 to 11 ordered points, with optional anchor labels."
    settings = ("scale_points", "labels")
    level = "ordinal"
    score = "numeric"
    model = "clmm"
    analysis = ("ordinal", "agreement", "ceiling", "graded_validity")

    def choices(self, rule: CriterionRule) -> list[str]:
        return [str(point) for point in range(1, (rule.scale_points or 0) + 1)]

    def numeric(self, rule: CriterionRule, value: str) -> float | None:
        return float(value) if value != "" else None

    def categories(self, rule: CriterionRule) -> list[Any] | None:
        return list(range(1, int(rule.scale_points) + 1)) if rule.scale_points else None

    def scale_bounds(self, rule: CriterionRule) -> tuple[float, float] | None:
        return 1.0, float(rule.scale_points or 5)

    def problems(self, rule: CriterionRule) -> list[str]:
        points, labels = rule.scale_points, rule.labels
        if points is None or not MIN_POINTS <= points <= MAX_POINTS:
            return [f"likert needs scale_points between {MIN_POINTS} and {MAX_POINTS}"]
        if isinstance(labels, dict):
            return [f"anchor label for point {point!r} is outside 1..{points}"
                    for point in labels
                    if not str(point).isdigit() or not 1 <= int(point) <= points]
        return []

    def choice_views(self, rule: CriterionRule, sides: tuple[str, str],
                     translate: Translate = untranslated) -> list[ChoiceView] | None:
        labels = rule.labels if isinstance(rule.labels, dict) else {}
        return [ChoiceView(value, labels.get(value, ""), digit_key(index))
                for index, value in enumerate(self.choices(rule))]

    def feedback_label(self, value: str, label: str) -> str:
        return f"{value}: {label}" if label else value


KIND = Likert()
