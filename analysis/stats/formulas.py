"""A user's model formulas: which columns they may name, which criterion each applies to, and
the frame a model is fitted on (no Django). A formula outside the grammar of
`analysis.stats.formula` is refused (FormulaError) before anything is computed, since it is a
mistake (or an attack), not a property of the data.

Beside the pipeline rather than in it: the web request that starts an analysis checks its
formulas here, and the pipeline's package loads scipy.stats and the models."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import pandas as pd

from evalstudy.criteria import KINDS, kind_of

from .formula import Formula, FormulaError, is_formula_name, parse_formula


def formula_response(criterion: Mapping[str, Any]) -> str | None:
    """The response column a formula of this criterion is fitted on (`rating`, `y`, `score`:
    its kind's model says which), None when its kind has no model."""
    kind = criterion.get("kind")
    return kind_of(kind).formula_response if kind in KINDS else None


FORMULA_BASE_COLUMNS = ("system", "item", "rater")
# Columns analyse_criterion adds to the judgments before fitting: metadata never takes their
# plain names, whatever the criterion's kind, so that the rule below needs no frame.
ADDED_COLUMNS = ("unit", "rating", "y", "score")
_METADATA = ("item.", "system.", "rater.")  # rater.: analysis.stats.covariates


def metadata_aliases(columns: Iterable[str]) -> dict[str, str]:
    """Plain names of metadata columns (`system.temp` -> `temp`) where the plain name is free:
    not a column of the judgments, not one the pipeline adds, not an earlier alias (item
    fields come before system fields, as `judgments_tidy` orders them)."""
    columns = [str(c) for c in columns]
    taken = set(columns) | set(ADDED_COLUMNS)
    aliases: dict[str, str] = {}
    for column in columns:
        if column.startswith(_METADATA):
            plain = column.split(".", 1)[1]
            if plain not in taken:
                aliases[column] = plain
                taken.add(plain)
    return aliases


def formula_columns(columns: Iterable[str]) -> list[str]:
    """The columns a user's formula may name, given the tidy judgment table's columns: system,
    item, rater and each item/system metadata field, under its plain name where it has one
    and under its dotted name (`speaker` and `item.speaker`). The service checks formulas
    with this before a run exists (columns from the database), the pipeline again on the
    data: one rule for both."""
    columns = [str(c) for c in columns]
    aliases = metadata_aliases(columns)
    names = list(FORMULA_BASE_COLUMNS)
    names += [aliases[c] for c in columns if c in aliases]
    names += [c for c in columns if c.startswith(_METADATA)]
    return [n for n in dict.fromkeys(names) if is_formula_name(n)]


def criterion_formula(options: Mapping[str, Any], criterion: Mapping[str, Any],
                      columns: Iterable[str]) -> Formula | None:
    """The user's formula for one criterion, parsed against `formula_columns(columns)` and
    given the internal response (`rating` or `y`); None where the default model applies.

    `options["formulas"][key]` wins; its response is the internal name or the key. Otherwise
    `options["formula"]` applies when its response names this criterion's kind (`rating ~`:
    Likert, `y ~`: binary and severity) or its key. Raises FormulaError."""
    key = str(criterion["key"])
    internal = formula_response(criterion)
    if internal is None:
        return None
    allowed = formula_columns(columns)
    formulas = options.get("formulas") or {}
    if key in formulas:
        return parse_formula(formulas[key], allowed, responses=[internal, key],
                             label=f"formulas[{key}]").with_response(internal)
    text = options.get("formula")
    if text is None:
        return None
    parsed = parse_formula(text, allowed, responses=["rating", "y", key], label="formula")
    return parsed.with_response(internal) if parsed.response[0] in (internal, key) else None


def check_formulas(options: Mapping[str, Any], criteria: Sequence[Mapping[str, Any]],
                   columns: Iterable[str]) -> dict[str, Formula]:
    """Every formula of `options` checked against the study's criteria and columns (the
    tidy judgment table's, see `formula_columns`): {criterion key: its formula} for the
    criteria given one. Raises FormulaError with a located message for the first bad one,
    an unknown criterion key in `formulas`, or a formula for a criterion that has no model."""
    columns = [str(c) for c in columns]
    allowed = formula_columns(columns)
    by_key = {str(c["key"]): c for c in criteria}
    modelled = [k for k, c in by_key.items() if formula_response(c) is not None]
    criteria_list = f"criteria with a model are {', '.join(modelled) or '(none)'}"
    formulas = options.get("formulas")
    if formulas is not None and not isinstance(formulas, Mapping):
        raise FormulaError("formulas", "must map criterion keys to formulas",
                           allowed=criteria_list)
    for key in formulas or {}:
        label = f"formulas[{key}]"
        if key not in by_key:
            raise FormulaError(label, f"the study has no criterion {key!r}",
                               allowed=criteria_list)
        if formula_response(by_key[key]) is None:
            raise FormulaError(label, f"criterion {key!r} is {by_key[key]['kind']}: formulas "
                                      "apply to likert, binary and severity criteria",
                               allowed=criteria_list)
    resolved: dict[str, Formula] = {}
    for key in formulas or {}:
        found = criterion_formula({"formulas": formulas}, by_key[key], columns)
        if found is not None:
            resolved[key] = found
    text = options.get("formula")
    if text is not None:
        # Checked even when no criterion takes it: a refused formula is refused everywhere.
        parsed = parse_formula(text, allowed, responses=["rating", "y", *modelled],
                               label="formula")
        for key in modelled:
            internal = formula_response(by_key[key])
            if internal is not None and key not in resolved and parsed.response[0] in (
                    internal, key):
                resolved[key] = parsed.with_response(internal)
    return resolved


def model_frame(rows: pd.DataFrame, response: str, values: pd.Series) -> pd.DataFrame:
    frame = rows.copy()
    frame[response] = values.to_numpy()
    # Metadata columns get plain names usable in formulas (system.temp -> temp); the dotted
    # columns stay, so a formula may name either (see formula_columns).
    for column, plain in metadata_aliases(rows.columns).items():
        frame[plain] = frame[column]
    return frame


