"""Best-worst scaling: the best and the worst of the outputs shown (2 to 6 of one item):
"best=A;worst=C". The form posts `key__best` and `key__worst`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .base import TUPLE, AnswerKind, Translate, gettext_noop, letters_shown, untranslated

if TYPE_CHECKING:
    from ..rule import CriterionRule, ShownText


def best_worst_of(value: str) -> tuple[str, str]:
    """(best, worst) letters of a stored best-worst answer."""
    parts = dict(piece.split("=", 1) for piece in value.split(";"))
    return parts["best"], parts["worst"]


class BestWorst(AnswerKind):
    name = "best_worst"
    label = "Best and worst of the outputs shown"
    order = 95
    description = "Pick the best and the worst of several outputs (best-worst design)."
    shows = TUPLE
    designs = ("best_worst",)
    slot_bound = True
    analysis = ("best_worst",)
    task_phrase = "choosing the best and worst of"

    def normalise(self, rule: CriterionRule, raw: object, shown: ShownText | None) -> str:
        letters = letters_shown(self, shown)
        if isinstance(raw, Mapping):
            parts = {str(k).strip().lower(): str(v).strip().upper() for k, v in raw.items()}
        else:
            parts = {}
            for piece in str(raw).split(";"):
                name, _, letter = piece.partition("=")
                parts[name.strip().lower()] = letter.strip().upper()
        best, worst = parts.get("best", ""), parts.get("worst", "")
        if len(best) != 1 or len(worst) != 1 or best not in letters or worst not in letters:
            raise ValueError(f"choose the best and the worst of {', '.join(letters)}")
        if best == worst:
            raise ValueError("the best and the worst must be different outputs")
        return f"best={best};worst={worst}"

    def collect(self, key: str, posted: Mapping[str, Any]) -> object:
        best, worst = posted.get(f"{key}__best"), posted.get(f"{key}__worst")
        if best is not None or worst is not None:
            return f"best={best or ''};worst={worst or ''}"
        return posted.get(key)

    def widget(self, rule: CriterionRule, answer: str, letters: str,
               translate: Translate = untranslated) -> dict[str, Any] | None:
        """The letters and the answer given; None before the letters are known."""
        if not letters:
            return None
        parts = dict(piece.partition("=")[::2] for piece in answer.split(";") if "=" in piece)
        return {"letters": letters, "best": parts.get("best", ""),
                "worst": parts.get("worst", "")}

    def answer_error(self, rule: CriterionRule, error: ValueError,
                     translate: Translate = untranslated) -> str:
        return translate(gettext_noop("choose the best output and a different worst one"))


KIND = BestWorst()
