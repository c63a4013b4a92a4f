"""Pairwise: which of two outputs shown side by side is better, "A" or "B"; "tie" when the
criterion allows ties, and "both_good"/"both_bad" when it allows the absolute answers (neither
preferred, and where the pair stands). Plain preference statistics read all three as no
preference; the joint model of `analysis.stats.pairwise_joint` reads the level too."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

from .base import PAIR, AnswerKind, ChoiceView, Translate, gettext_noop, untranslated

if TYPE_CHECKING:
    from ..rule import CriterionRule

TIE = "tie"
BOTH_GOOD = "both_good"
BOTH_BAD = "both_bad"
#: Pairwise answers that prefer neither output: a tie, and the absolute "both" answers.
NO_PREFERENCE = (TIE, BOTH_GOOD, BOTH_BAD)
# Spellings read as each (after lower-casing and joining words with "_"): import files and
# judges write "both good", "Both-Bad", "both are bad".
_WORDS = {
    "tie": TIE,
    "both_good": BOTH_GOOD, "bothgood": BOTH_GOOD, "both_are_good": BOTH_GOOD,
    "both_bad": BOTH_BAD, "bothbad": BOTH_BAD, "both_are_bad": BOTH_BAD,
}
# The keys of its answers: a, b, t (tie), g (both good), x (both bad: "b" is taken by output
# B); none of them is a media player's (p, r, j, s) or the span marker's (m).
KEYS = {"A": "a", "B": "b", TIE: "t", BOTH_GOOD: "g", BOTH_BAD: "x"}


def pairwise_choices(allow_tie: object, allow_both: object) -> list[str]:
    """A pairwise criterion's answers, in display order."""
    return (["A", "B"] + ([TIE] if allow_tie else [])
            + ([BOTH_GOOD, BOTH_BAD] if allow_both else []))


_PAIR_FLIP = {"A": "B", "B": "A"}


def pair_oriented(output: int, output_b: int | None, value: str
                  ) -> tuple[tuple[int, int | None], str]:
    """(unit, value) with a pair of outputs keyed by output id, lower first, and an answer
    given with the pair the other way round turned around ("A" <-> "B"; a tie, both good and
    both bad stay as they are), so that raters who saw the pair either way round, and a judge,
    are counted on one unit (the adjudication queue, the judge prompt versions). A single
    output (`output_b` None) is its own unit."""
    if output_b is None or output <= output_b:
        return (output, output_b), value
    return (output_b, output), _PAIR_FLIP.get(value, value)


class Pairwise(AnswerKind):
    name = "pairwise"
    label = "A/B preference"
    order = 40
    description = "Which of two outputs shown side by side is better (ties optional)."
    settings = ("allow_tie", "allow_both")
    shows = PAIR
    designs = ("pairwise", "adaptive")
    level = "nominal"
    analysis = ("preference", "agreement", "ceiling", "pairwise_validity")
    unit_noun = "output pairs"

    def choices(self, rule: CriterionRule) -> list[str]:
        return pairwise_choices(rule.allow_tie, rule.allow_both)

    def parse(self, rule: CriterionRule, text: str) -> str:
        upper = text.upper()
        if upper in {"A", "B"}:
            return upper
        word = _WORDS.get(re.sub(r"[\s_-]+", "_", text.lower()))
        if (word == TIE and rule.allow_tie) or (
                word in (BOTH_GOOD, BOTH_BAD) and rule.allow_both):
            return word
        return super().parse(rule, text)

    def categories(self, rule: CriterionRule) -> list[Any] | None:
        return pairwise_choices(rule.allow_tie, rule.allow_both)

    def choice_views(self, rule: CriterionRule, sides: tuple[str, str],
                     translate: Translate = untranslated) -> list[ChoiceView] | None:
        labels = {TIE: gettext_noop("Tie"), BOTH_GOOD: gettext_noop("Both are good"),
                  BOTH_BAD: gettext_noop("Both are bad")}
        views = []
        for value in self.choices(rule):
            if value in labels:
                label = translate(labels[value])
            else:
                label = (translate(gettext_noop("%(side)s is better"))
                         % {"side": sides[0] if value == "A" else sides[1]})
            views.append(ChoiceView(value, label, KEYS[value]))
        return views


KIND = Pairwise()
