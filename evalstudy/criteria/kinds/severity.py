"""Severity: LATTE's three levels of meaning preservation, "0" (fully preserved), "1" (mostly,
minor errors) and "2" (lost or changed). Its binary reading follows LATTE: levels 0 and 1
preserve the meaning."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .base import AnswerKind, ChoiceView, Translate, gettext_noop, untranslated

if TYPE_CHECKING:
    from ..rule import CriterionRule

DEFAULT_LABELS = (
    gettext_noop("Meaning fully preserved"),
    gettext_noop("Meaning mostly preserved (minor errors)"),
    gettext_noop("Meaning lost or changed"),
)


class Severity(AnswerKind):
    name = "severity"
    label = "3-point error severity"
    order = 30
    description = "LATTE's three levels: meaning fully preserved, mostly preserved, lost."
    settings = ("labels",)
    level = "ordinal"
    score = "binary"
    model = "glmm"
    analysis = ("binomial", "severity_levels", "agreement", "ceiling", "binary_validity")
    default_labels = DEFAULT_LABELS

    def choices(self, rule: CriterionRule) -> list[str]:
        return ["0", "1", "2"]

    def numeric(self, rule: CriterionRule, value: str) -> float | None:
        return float(value) if value != "" else None

    def categories(self, rule: CriterionRule) -> list[Any] | None:
        return [0, 1, 2]

    def scale_bounds(self, rule: CriterionRule) -> tuple[float, float] | None:
        return 0.0, 2.0

    def binary(self, value: str) -> float | None:
        return {"0": 1.0, "1": 1.0, "2": 0.0}.get(value)

    def binary_value(self, preserved: bool) -> str:
        # A preserved meaning is stored as 0 (fully preserved), a lost one as 2.
        return "0" if preserved else "2"

    def binary_names(self) -> tuple[str, str]:
        return "meaning preserved", "not preserved"

    def problems(self, rule: CriterionRule) -> list[str]:
        labels = rule.labels
        if labels and (isinstance(labels, dict) or len(labels) != 3):
            return ["severity labels must be a list of exactly 3 descriptions (levels 0, 1, 2)"]
        return []

    def choice_views(self, rule: CriterionRule, sides: tuple[str, str],
                     translate: Translate = untranslated) -> list[ChoiceView] | None:
        labels = rule.labels
        names = (list(labels) if isinstance(labels, list | tuple) and len(labels) == 3
                 else [translate(label) for label in DEFAULT_LABELS])
        return [ChoiceView(value, names[index], value)
                for index, value in enumerate(self.choices(rule))]

    def feedback_label(self, value: str, label: str) -> str:
        return f"{value}: {label}" if label else value


KIND = Severity()
