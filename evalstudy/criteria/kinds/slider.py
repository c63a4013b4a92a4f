"""Slider: a whole number in the criterion's range, "0".."100" by default (direct assessment,
WMT, Graham et al. 2013). An expected answer may be a range "lo..hi" of acceptable scores
(e.g. "0..30" for a degraded output, as direct assessment's quality control uses them)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .base import AnswerKind, Translate, gettext_noop, untranslated, whole_number

if TYPE_CHECKING:
    from ..rule import CriterionRule

# Direct assessment's 0-100 scale, the default range; a configured range stays within LIMIT
# either side of 0 and spans at least 2 points.
DEFAULT_RANGE = (0, 100)
LIMIT = 10_000


def slider_range(rule: CriterionRule) -> tuple[int, int]:
    """The slider's (lowest, highest) value: its own range, else direct assessment's."""
    if rule.scale_min is None or rule.scale_max is None:
        return DEFAULT_RANGE
    return int(rule.scale_min), int(rule.scale_max)


class Slider(AnswerKind):
    name = "slider"
    label = "Slider (direct assessment)"
    order = 70
    description = "A score on a continuous scale, 0 to 100 unless you set the range."
    settings = ("scale_min", "scale_max", "labels")
    level = "interval"
    score = "numeric"
    model = "lmm"
    analysis = ("slider", "graded_validity")

    def parse(self, rule: CriterionRule, text: str) -> str:
        return whole_number(text, *slider_range(rule), noun="number")

    def normalise_expected(self, rule: CriterionRule, raw: object) -> str:
        if isinstance(raw, str) and ".." in raw:
            low, _, high = raw.partition("..")
            low, high = self.parse(rule, low.strip()), self.parse(rule, high.strip())
            if int(low) > int(high):
                raise ValueError(f"the range {raw!r} is empty")
            return f"{low}..{high}"
        return rule.normalise(raw)

    def numeric(self, rule: CriterionRule, value: str) -> float | None:
        return float(value) if value != "" else None

    def categories(self, rule: CriterionRule) -> list[Any] | None:
        return None

    def problems(self, rule: CriterionRule) -> list[str]:
        scale_min, scale_max, labels = rule.scale_min, rule.scale_max, rule.labels
        if (scale_min is None) != (scale_max is None):
            return ["a slider needs both scale_min and scale_max, or neither (0 to 100)"]
        low, high = slider_range(rule)
        problems = []
        if not -LIMIT <= low < high <= LIMIT:
            problems.append(f"a slider's scale_min must be below its scale_max, both within "
                            f"{-LIMIT}..{LIMIT}")
        if labels and not isinstance(labels, dict):
            problems.append('slider labels name points of the range, e.g. {"0": "nonsense", '
                            '"100": "perfect"}')
        elif labels:
            for point in labels:
                try:
                    inside = low <= int(str(point)) <= high
                except ValueError:
                    inside = False
                if not inside:
                    problems.append(f"slider label for {point!r} is outside {low}..{high}")
        return problems

    def widget(self, rule: CriterionRule, answer: str, letters: str,
               translate: Translate = untranslated) -> dict[str, Any] | None:
        """Its range, its middle (where the handle starts: no answer until moved) and its
        anchor labels in order."""
        low, high = slider_range(rule)
        labels = rule.labels if isinstance(rule.labels, dict) else {}
        anchors = sorted(((int(point), text) for point, text in labels.items()
                          if str(point).lstrip("-").isdigit()), key=lambda pair: pair[0])
        return {"min": low, "max": high, "middle": (low + high) // 2,
                "anchors": [{"value": v, "label": t} for v, t in anchors]}

    def answer_error(self, rule: CriterionRule, error: ValueError,
                     translate: Translate = untranslated) -> str:
        low, high = slider_range(rule)
        return (translate(gettext_noop("give a whole number from %(low)s to %(high)s"))
                % {"low": low, "high": high})

    # --- added for annotation ---
    def value_range(self, rule: CriterionRule) -> tuple[float, float] | None:
        low, high = slider_range(rule)
        return float(low), float(high)


KIND = Slider()
