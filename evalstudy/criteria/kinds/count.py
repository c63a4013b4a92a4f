"""Count: a whole number of things a rater counted in an output (errors heard in a
transcript, facts left out of a summary), from 0 unless the criterion sets its range. Fewer is
better: the analysis reads a count as a penalty, like MQM's weighted errors, and compares
systems on its mean with a linear mixed model."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .base import AnswerKind, Translate, gettext_noop, untranslated, whole_number

if TYPE_CHECKING:
    from ..rule import CriterionRule

# A count starts at 0; without a configured range it may go up to DEFAULT_MOST (more than a
# rater counts reliably in one output), and a configured range stays within 0..LIMIT.
DEFAULT_MOST = 100
LIMIT = 10_000


def count_range(rule: CriterionRule) -> tuple[int, int]:
    """The (fewest, most) a rater may give: the criterion's range, else 0 to DEFAULT_MOST."""
    if rule.scale_min is None or rule.scale_max is None:
        return 0, DEFAULT_MOST
    return int(rule.scale_min), int(rule.scale_max)


class Count(AnswerKind):
    name = "count"
    label = "Count"
    order = 75
    description = ("How many of something the rater counts (errors, omissions): a whole "
                   "number from 0, fewer is better.")
    settings = ("scale_min", "scale_max")
    level = "interval"
    score = "penalty"
    model = "lmm"
    analysis = ("slider", "graded_validity")

    def parse(self, rule: CriterionRule, text: str) -> str:
        return whole_number(text, *count_range(rule), noun="count")

    def numeric(self, rule: CriterionRule, value: str) -> float | None:
        return float(value) if value != "" else None

    def categories(self, rule: CriterionRule) -> list[Any] | None:
        return None

    def value_range(self, rule: CriterionRule) -> tuple[float, float] | None:
        low, high = count_range(rule)
        return float(low), float(high)

    def problems(self, rule: CriterionRule) -> list[str]:
        if (rule.scale_min is None) != (rule.scale_max is None):
            return ["a count needs both scale_min and scale_max, or neither (0 to "
                    f"{DEFAULT_MOST})"]
        low, high = count_range(rule)
        if not 0 <= low < high <= LIMIT:
            return [f"a count's scale_min must be at least 0 and below its scale_max, at most "
                    f"{LIMIT}"]
        return []

    def widget(self, rule: CriterionRule, answer: str, letters: str,
               translate: Translate = untranslated) -> dict[str, Any] | None:
        low, high = count_range(rule)
        return {"min": low, "max": high}

    def answer_error(self, rule: CriterionRule, error: ValueError,
                     translate: Translate = untranslated) -> str:
        low, high = count_range(rule)
        return (translate(gettext_noop("give a whole number from %(low)s to %(high)s"))
                % {"low": low, "high": high})


KIND = Count()
