"""Ranking: the outputs shown (2 to 6 of one item), best first, by their letters: "B>A>C"
(every letter once). The form posts one rank per output (`key__A=2`, `key__B=1`: it works
without JavaScript), read as "A=2;B=1"."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from .base import LETTERS, TUPLE, AnswerKind, Translate, gettext_noop, letters_shown, untranslated

if TYPE_CHECKING:
    from ..rule import CriterionRule, ShownText


def ranking_of(value: str) -> list[str]:
    """The letters of a stored ranking, best first."""
    return value.split(">") if value else []


def _canonical(raw: object, letters: str) -> str:
    text = "" if isinstance(raw, list | tuple) else str(raw)
    if "=" in text:  # one rank per output, as the form posts them: "A=2;B=1;C=3"
        ranks: dict[str, str] = {}
        for piece in text.split(";"):
            letter, _, rank = piece.partition("=")
            ranks[letter.strip().upper()] = rank.strip()
        if any(not rank.isdigit() for rank in ranks.values()) or sorted(
                int(rank) for rank in ranks.values()) != list(range(1, len(letters) + 1)):
            raise ValueError(f"give each of {', '.join(letters)} a different rank from 1 to "
                             f"{len(letters)}")
        order = sorted(ranks, key=lambda letter: int(ranks[letter]))
    elif isinstance(raw, list | tuple):
        order = [str(x).strip().upper() for x in raw]
    else:
        order = [x.strip().upper() for x in text.replace(",", ">").split(">")]
    if sorted(order) != sorted(letters):
        raise ValueError(f"a ranking orders every output shown once: {', '.join(letters)} "
                         f"(got {'>'.join(order) or 'nothing'})")
    return ">".join(order)


class Ranking(AnswerKind):
    name = "ranking"
    label = "Ranking of the outputs shown"
    order = 90
    description = "Order several outputs of one item, best first (ranking design)."
    shows = TUPLE
    designs = ("ranking",)
    slot_bound = True
    analysis = ("ranks",)
    task_phrase = "ranking"

    def normalise(self, rule: CriterionRule, raw: object, shown: ShownText | None) -> str:
        return _canonical(raw, letters_shown(self, shown))

    def collect(self, key: str, posted: Mapping[str, Any]) -> object:
        ranks = {letter: posted.get(f"{key}__{letter}") for letter in LETTERS}
        given = {letter: str(rank).strip() for letter, rank in ranks.items() if rank is not None}
        if given:
            return ";".join(f"{letter}={rank}" for letter, rank in given.items())
        return posted.get(key)

    def widget(self, rule: CriterionRule, answer: str, letters: str,
               translate: Translate = untranslated) -> dict[str, Any] | None:
        """Each output's letter and the rank given (if any), with the ranks 1..k to choose
        from; None before the letters are known."""
        if not letters:
            return None
        given: dict[str, str] = {}
        if "=" in answer:  # as posted: "A=2;B=1"
            for piece in answer.split(";"):
                letter, _, rank = piece.partition("=")
                given[letter] = rank
        elif answer:
            given = {letter: str(rank) for rank, letter in
                     enumerate(ranking_of(answer), start=1)}
        choices = [str(rank) for rank in range(1, len(letters) + 1)]
        return {"rows": [{"letter": letter, "rank": given.get(letter, ""), "choices": choices}
                         for letter in letters], "choices": choices}

    def answer_error(self, rule: CriterionRule, error: ValueError,
                     translate: Translate = untranslated) -> str:
        return translate(gettext_noop("give each output a different rank, from 1 (best) down"))


KIND = Ranking()
