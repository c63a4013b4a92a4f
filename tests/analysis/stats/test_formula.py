"""The formula grammar (analysis/stats/formula.py): what is accepted and how it is rebuilt, each
refused construct with its 1-based position, the columns rule the service and the pipeline
share, and that the engines only ever receive rebuilt text. Django-free."""

from __future__ import annotations

import re

import patsy
import pytest
from hypothesis import given
from hypothesis import strategies as st

from analysis.stats import models as M
from analysis.stats import pipeline
from analysis.stats import rbridge as rb
from analysis.stats.formula import (
    Formula,
    FormulaError,
    RandomTerm,
    is_formula_name,
    parse_formula,
    r_coefficient_name,
)

COLUMNS = ["system", "item", "rater", "speaker", "severity"]
RESPONSES = ["rating", "y"]
ALLOWED = "columns are system, item, rater, speaker, severity"


def parse(text: str, **kwargs) -> Formula:
    kwargs.setdefault("responses", RESPONSES)
    return parse_formula(text, kwargs.pop("columns", COLUMNS), **kwargs)


# --------------------------------------------------------------------------------------------
# accepted forms


@pytest.mark.parametrize(("text", "rebuilt", "patsy_rhs"), [
    ("rating ~ system", "rating ~ system", "system"),
    ("rating~system+(1|rater)+(1|item)", "rating ~ system + (1|rater) + (1|item)", "system"),
    ("rating ~ 1", "rating ~ 1", "1"),
    ("rating ~ 1 + system", "rating ~ 1 + system", "system"),
    ("y ~ (1|rater)", "y ~ (1|rater)", "1"),
    ("y ~ system:speaker", "y ~ system:speaker", "system:speaker"),
    ("y ~ system*speaker", "y ~ system + speaker + system:speaker",
     "system + speaker + system:speaker"),
    ("y ~ system*speaker*severity",
     "y ~ system + speaker + severity + system:speaker + system:severity + speaker:severity "
     "+ system:speaker:severity",
     "system + speaker + severity + system:speaker + system:severity + speaker:severity + "
     "system:speaker:severity"),
    ("y ~ system:speaker*severity",  # ':' binds tighter than '*', as in R
     "y ~ severity + system:speaker + system:speaker:severity",
     "severity + system:speaker + system:speaker:severity"),
    ("y ~ system + system + speaker:system + system:speaker", "y ~ system + speaker:system",
     "system + speaker:system"),  # duplicates dropped, first spelling kept
    ("rating ~ system + (1 + speaker|rater)", "rating ~ system + (1 + speaker|rater)", "system"),
    ("rating ~ system + (speaker|rater)", "rating ~ system + (speaker|rater)", "system"),
    ("rating ~ system + (1|rater:item)", "rating ~ system + (1|rater:item)", "system"),
    ("\trating  ~\tsystem ", "rating ~ system", "system"),
])
def test_accepted_forms_are_rebuilt(text, rebuilt, patsy_rhs):
    formula = parse(text)
    assert formula.text == rebuilt == str(formula)
    assert formula.patsy_rhs() == patsy_rhs
    assert parse(formula.text) == formula  # the rebuilt text is a fixed point


def test_parsed_fields():
    formula = parse("rating ~ 1 + system*speaker + (1 + severity|rater) + (1|rater:item)")
    assert formula == Formula(
        response=("rating",),
        fixed=(("system",), ("speaker",), ("system", "speaker")),
        random=(RandomTerm(("1", "severity"), ("rater",)), RandomTerm(("1",), ("rater", "item"))),
        intercept=True,
    )
    assert formula.groups == ["rater", "item"]
    assert formula.columns == ["rating", "system", "speaker", "severity", "rater", "item"]
    assert formula.fixed_text == "1 + system + speaker + system:speaker"
    assert formula.fixed_only().text == "rating ~ 1 + system + speaker + system:speaker"
    assert formula.with_response("y").text.startswith("y ~ 1 + system")


def test_dotted_and_keyword_names_are_wrapped_for_patsy():
    formula = parse("y ~ item.speaker*class + lambda_", columns=["item.speaker", "class",
                                                                 "lambda_"])
    assert formula.text == "y ~ item.speaker + class + item.speaker:class + lambda_"
    assert formula.patsy_rhs() == ('Q("item.speaker") + Q("class") + '
                                   'Q("item.speaker"):Q("class") + lambda_')
    data = {"item.speaker": ["a", "b", "a", "b"], "class": ["u", "u", "v", "v"],
            "lambda_": [0.1, 0.2, 0.3, 0.4]}
    matrix = patsy.dmatrix(formula.patsy_rhs(), data, eval_env=patsy.EvalEnvironment([{}]),
                           return_type="dataframe")
    assert [r_coefficient_name(c) for c in matrix.columns] == [
        "Intercept", "item.speakerb", "classv", "item.speakerb:classv", "lambda_"]


@pytest.mark.parametrize(("patsy_name", "r_name"), [
    ("system[T.B]", "systemB"),
    ("temp[T.warm]:contact[T.yes]", "tempwarm:contactyes"),
    ('Q("item.speaker")[T.s2]', "item.speakers2"),
    ('system[T.B]:Q("item.speaker")[s1]', "systemB:item.speakers1"),
    ('Q("x")', "x"),
])
def test_coefficient_names_map_back_to_r(patsy_name, r_name):
    assert r_coefficient_name(patsy_name) == r_name


def test_cbind_only_where_allowed():
    formula = parse("cbind(incidence, failures) ~ period + (1|herd)",
                    columns=["incidence", "failures", "period", "herd"], allow_cbind=True,
                    responses=None)
    assert formula.response == ("incidence", "failures")
    assert formula.text == "cbind(incidence, failures) ~ period + (1|herd)"
    assert formula.columns == ["incidence", "failures", "period", "herd"]
    with pytest.raises(FormulaError, match=r"position 1: function calls are not allowed "
                                           r"\(cbind\(\.\.\.\) responses are accepted only"):
        parse("cbind(incidence, failures) ~ period", columns=["incidence", "failures", "period"],
              responses=None)
    with pytest.raises(FormulaError, match=r"position 23: '-' \(removing a term, or subtr"):
        parse("cbind(incidence, size - incidence) ~ period", allow_cbind=True, responses=None,
              columns=["incidence", "size", "period"])


# hypothesis: formulas generated from the grammar parse, rebuild to a fixed point, and the
# rebuilt texts hold nothing but names, '1' and the grammar's punctuation.
_names = st.sampled_from(COLUMNS)
_interaction = st.lists(_names, min_size=1, max_size=3).map(":".join)
_product = st.lists(_interaction, min_size=1, max_size=3).map("*".join)
_effects = st.lists(st.one_of(st.just("1"), _names), min_size=1, max_size=3).map(" + ".join)
_groups = st.lists(_names, min_size=1, max_size=2).map(":".join)
_random = st.tuples(_effects, _groups).map(lambda t: f"({t[0]}|{t[1]})")
_term = st.one_of(st.just("1"), _product, _random)
_formulas = st.tuples(st.sampled_from(RESPONSES), st.lists(_term, min_size=1, max_size=5)).map(
    lambda t: f"{t[0]} ~ {' + '.join(t[1])}")


@given(_formulas)
def test_generated_formulas_round_trip(text):
    formula = parse(text)
    assert parse(formula.text) == formula
    assert set(formula.text) <= set("abcdefghijklmnopqrstuvwxyz.:+*()|~ 1")
    assert set(formula.patsy_rhs()) <= set("abcdefghijklmnopqrstuvwxyz.:+* 1")
    assert set(formula.columns) <= set(COLUMNS) | set(RESPONSES)


# --------------------------------------------------------------------------------------------
# refused constructs: (formula, 1-based position, what the message says)


REFUSED = [
    ("rating ~ system + I(system)", 19, "function calls are not allowed (I(...))"),
    ("rating ~ log(severity)", 10, "function calls are not allowed (log(...))"),
    ("rating ~ system + I(__import__('os').system('id > f'))", 19,
     "function calls are not allowed (I(...))"),
    ("y ~ system + I(nchar(system('id', intern=TRUE)))", 14,
     "function calls are not allowed (I(...))"),
    ("rating ~ system(1)", 10, "function calls are not allowed (system(...))"),
    ("rating ~ Sys.setenv(A=1)", 10, "function calls are not allowed (Sys.setenv(...))"),
    ("rating ~ system.__class__", 16, "attribute access is not allowed ('system.__class__')"),
    ("rating ~ rater.name", 15, "attribute access is not allowed ('rater.name')"),
    ("rating ~ __import__", 10, "names starting with '_' are not allowed ('__import__')"),
    ("rating ~ .hidden", 10, "names starting with '.' are not allowed ('.hidden')"),
    ("rating ~ .", 10, "'.' (all other columns) is not allowed: name the columns"),
    ("rating ~ `system`", 10, "backticks (quoted names) are not allowed"),
    ("rating ~ system + 'x'", 19, "string literals are not allowed"),
    ('rating ~ system + "x"', 19, "string literals are not allowed"),
    ("rating ~ system + 2", 19, "number '2' is not allowed: the only number is 1"),
    ("rating ~ system + 1.5", 19, "number '1.5' is not allowed"),
    ("rating ~ 0 + system", 10, "number '0' is not allowed"),
    ("rating ~ system - 1", 17, "'-' (removing a term, or subtraction) is not allowed"),
    ("rating ~ system^2", 16, "'^' is not allowed; terms are joined with +, * and :"),
    ("rating ~ system %in% item", 17, "'%' operators (such as %in%) are not allowed"),
    ("rating ~ (1|rater/item)", 18, "'/' (nesting, or division) is not supported"),
    ("rating ~ system$levels", 16, "'$' (element access) is not allowed"),
    ("rating ~ system@x", 16, "'@' (slot access) is not allowed"),
    ("rating ~ system[[1]]", 16, "indexing with '[' is not allowed"),
    ("rating ~ system; q()", 16, "';' (a second statement) is not allowed"),
    ("rating ~ system\n+ rater", 16, "line breaks (U+000A) are not allowed"),
    ("rating ~ system\r", 16, "line breaks (U+000D) are not allowed"),
    ("rating ~ system\x00", 16, "control character U+0000 is not allowed"),
    ("rating ~ system # note", 17, "comments ('#') are not allowed"),
    ("rating ~ s\u0443stem", 11,
     "non-ASCII character '\u0443' (U+0443 CYRILLIC SMALL LETTER U) is not allowed"),
    ("rating ~ system\u00a0+ rater", 16, "non-ASCII character '\\xa0' (U+00A0 NO-BREAK SPACE)"),
    ("rating ~ TRUE", 10, "'TRUE' is an R reserved word, not a column"),
    ("rating ~ system + function", 19, "'function' is an R reserved word"),
    ("rating ~ NULL", 10, "'NULL' is an R reserved word"),
    ("rating ~ Inf", 10, "'Inf' is an R reserved word"),
    ("rating ~ sytem", 10, "unknown column 'sytem' (did you mean 'system'?)"),
    ("rating ~ item.foo", 10, "unknown column 'item.foo'"),
    ("rating ~ system + (system)", 26, "parentheses are only for random-effect terms"),
    ("rating ~ system + (1||rater)", 22, "'||' (uncorrelated random effects) is not supported"),
    ("rating ~ system + (1|rater) )", 29, "unbalanced ')'"),
    ("rating ~ system + (1|rater", 27, "expected ')' closing the random-effect term"),
    ("rating ~ system + ((1|rater))", 20, "nested parentheses are not allowed"),
    ("rating ~ (system:item|rater)", 17, "interactions are not allowed inside a random-effect"),
    ("rating ~ 1:system", 11, "'1' (the intercept) cannot be part of an interaction"),
    ("rating ~ system*1", 17, "'1' (the intercept) cannot be part of an interaction"),
    ("rating ~ system rater", 17, "expected '+' between terms, found 'rater'"),
    ("rating ~ system +", 18, "expected column, found the end of the formula"),
    ("rating ~ system ~ item", 17, "only one '~' is allowed"),
    ("rating ~ system, item", 16, "',' is only allowed inside cbind(...)"),
    ("rating ~ system | rater", 17, "'|' belongs inside a random-effect term"),
    ("~ system", 1, "the response is missing before '~'"),
    ("score ~ system", 1, "unknown response 'score'"),
    ("rating rater ~ system", 8, "expected '~' after the response, found 'rater'"),
    ("rating ~ (1|speaker.x)", 20, "attribute access is not allowed ('speaker.x')"),
]


@pytest.mark.parametrize(("text", "position", "problem"), REFUSED)
def test_refused_constructs_are_located(text, position, problem):
    with pytest.raises(FormulaError) as caught:
        parse(text)
    assert caught.value.position == position
    assert problem in caught.value.problem
    assert str(caught.value).startswith(f"formula: position {position}: ")


def test_message_format_lists_what_is_allowed():
    with pytest.raises(FormulaError) as caught:
        parse("rating ~ system + I(x)")
    assert str(caught.value) == (
        f"formula: position 19: function calls are not allowed (I(...)); {ALLOWED}")
    with pytest.raises(FormulaError) as caught:
        parse("score ~ system", label="formulas[fluency]")
    assert str(caught.value) == ("formulas[fluency]: position 1: unknown response 'score'; "
                                 "the response is one of rating, y")
    with pytest.raises(FormulaError) as caught:
        parse("rating ~ (1|severity)", groups=["rater", "item"])
    assert str(caught.value).endswith("; grouping columns are rater, item")
    assert isinstance(caught.value, ValueError)


@pytest.mark.parametrize(("text", "message"), [
    ("nonsense", "formula: formula must look like 'rating ~ system + (1|rater) + (1|item)'"),
    ("", "formula: formula must look like"),
    (None, "formula: must be text, not NoneType"),
    (["rating ~ system"], "formula: must be text, not list"),
    ("rating ~ " + " + ".join(["system"] * 200), "formula: too long (1806 characters; at most "
                                                  "1000)"),
])
def test_not_a_formula(text, message):
    with pytest.raises(FormulaError, match="^" + re.escape(message)):
        parse(text)


def test_names_that_cannot_be_written_are_not_listed():
    assert is_formula_name("item.speaker") and is_formula_name("beam_size")
    for name in ("speech-type", "_x", ".x", "item._x", "TRUE", "2nd", "s\u0443stem", ""):
        assert not is_formula_name(name)
    with pytest.raises(FormulaError, match=r"; columns are system, item\.speaker$"):
        parse("rating ~ x", columns=["system", "speech-type", "item.speaker", "if"])


# --------------------------------------------------------------------------------------------
# the columns rule the service and the pipeline share


JUDGMENT_COLUMNS = ["judgment", "rater", "rater_kind", "is_human", "output", "item", "system",
                    "criterion", "value", "numeric", "seconds"]


def test_formula_columns_and_metadata_aliases():
    columns = [*JUDGMENT_COLUMNS, "item.speaker", "item.value", "item.unit", "item.speech-type",
               "system.speaker", "system.temp"]
    assert pipeline.metadata_aliases(columns) == {
        "item.speaker": "speaker", "item.speech-type": "speech-type", "system.temp": "temp"}
    # value is a judgment column, unit one the pipeline adds, speaker already item's
    assert pipeline.formula_columns(columns) == [
        "system", "item", "rater", "speaker", "temp", "item.speaker", "item.value",
        "item.unit", "system.speaker", "system.temp"]
    assert pipeline.formula_columns([]) == ["system", "item", "rater"]


CRITERIA = [{"key": "fluency", "kind": "likert"}, {"key": "usable", "kind": "binary"},
            {"key": "severity", "kind": "severity"}, {"key": "note", "kind": "text"},
            {"key": "preference", "kind": "pairwise"}]
TIDY = [*JUDGMENT_COLUMNS, "item.speaker", "system.temp"]


def test_check_formulas_resolves_responses():
    found = pipeline.check_formulas({"formula": "rating ~ system + temp + (1|rater)",
                                     "formulas": {"usable": "usable ~ system*speaker"}},
                                    CRITERIA, TIDY)
    assert {k: f.text for k, f in found.items()} == {
        "fluency": "rating ~ system + temp + (1|rater)",
        "usable": "y ~ system + speaker + system:speaker"}
    found = pipeline.check_formulas({"formula": "y ~ system + item.speaker"}, CRITERIA, TIDY)
    assert {k: f.text for k, f in found.items()} == {
        "usable": "y ~ system + item.speaker", "severity": "y ~ system + item.speaker"}
    # a global formula naming one criterion's key applies to that criterion only
    found = pipeline.check_formulas({"formula": "severity ~ system"}, CRITERIA, TIDY)
    assert {k: f.text for k, f in found.items()} == {"severity": "y ~ system"}
    assert pipeline.check_formulas({}, CRITERIA, TIDY) == {}


@pytest.mark.parametrize(("options", "message"), [
    ({"formulas": {"colour": "y ~ system"}},
     "formulas[colour]: the study has no criterion 'colour'; criteria with a model are "
     "fluency, usable, severity"),
    ({"formulas": {"note": "y ~ system"}},
     "formulas[note]: criterion 'note' is text: formulas apply to likert, binary and severity"),
    ({"formulas": "y ~ system"}, "formulas: must map criterion keys to formulas"),
    ({"formulas": {"fluency": "y ~ system"}},
     "formulas[fluency]: position 1: unknown response 'y'; the response is one of rating, "
     "fluency"),
    ({"formulas": {"usable": "usable ~ system + I(1)"}},
     "formulas[usable]: position 19: function calls are not allowed (I(...)); columns are "
     "system, item, rater, speaker, temp, item.speaker, system.temp"),
    ({"formula": "note ~ system"},
     "formula: position 1: unknown response 'note'; the response is one of rating, y, fluency, "
     "usable, severity"),
    ({"formula": "rating ~ judgment"}, "formula: position 10: unknown column 'judgment'"),
    ({"formula": "rating ~ value"}, "formula: position 10: unknown column 'value'"),
])
def test_check_formulas_refuses(options, message):
    with pytest.raises(FormulaError) as caught:
        pipeline.check_formulas(options, CRITERIA, TIDY)
    assert str(caught.value).startswith(message)


# --------------------------------------------------------------------------------------------
# the engines receive rebuilt text only


def _frame():
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(4)
    n = 300
    return pd.DataFrame({
        "rating": rng.integers(1, 6, n), "y": rng.integers(0, 2, n),
        "system": rng.choice(["A", "B"], n), "rater": rng.choice(list("pqrstu"), n),
        "item.speaker": rng.choice(["s1", "s2"], n), "class": rng.normal(size=n),
    })


def test_patsy_receives_the_rebuilt_text(monkeypatch):
    seen = []
    dmatrix = patsy.dmatrix

    def spy(formula, *args, **kwargs):
        seen.append(formula)
        return dmatrix(formula, *args, **kwargs)

    monkeypatch.setattr(patsy, "dmatrix", spy)
    text = "rating  ~ system*item.speaker+class +(1|rater)"
    fit = M.fit_clmm(_frame(), text, engine="statsmodels")
    assert seen == ['system + Q("item.speaker") + system:Q("item.speaker") + Q("class")']
    assert fit.formula == ("rating ~ system + item.speaker + system:item.speaker + class + "
                           "(1|rater)")
    assert [c.term for c in fit.coefficients] == [
        "systemB", "item.speakers2", "systemB:item.speakers2", "class"]
    assert fit.extra["fixed_formula"] == ("rating ~ system + item.speaker + "
                                          "system:item.speaker + class")
    seen.clear()
    glmm = M.fit_binomial_glmm(_frame(), "y ~ system + item.speaker + (1|rater)",
                               engine="statsmodels")
    assert seen == ['system + Q("item.speaker")']
    assert [c.term for c in glmm.coefficients] == ["(Intercept)", "systemB", "item.speakers2"]


@pytest.mark.skipif(not rb.r_available(), reason="R unavailable")
@pytest.mark.parametrize(("fit", "engine", "text", "rebuilt"), [
    ("fit_clmm", "R", "rating~system*item.speaker+(1 |rater)",
     "rating ~ system + item.speaker + system:item.speaker + (1|rater)"),
    ("fit_binomial_glmm", "R", "y ~ system + item.speaker+(1|rater)",
     "y ~ system + item.speaker + (1|rater)"),
    ("fit_binomial_glmm", "pymer4", "y ~ system + item.speaker+(1|rater)",
     "y ~ system + item.speaker + (1|rater)"),
])
def test_r_receives_the_rebuilt_text(monkeypatch, fit, engine, text, rebuilt):
    seen = []
    r_function = rb.r_function

    def spy(code):
        function = r_function(code)

        def call(*args):
            seen.extend(a for a in args if isinstance(a, str) and "~" in a)
            return function(*args)
        return call

    monkeypatch.setattr(rb, "r_function", spy)
    if engine == "pymer4":
        # An optional engine (GPL-combined through rpy2): not installed by default.
        pymer4_models = pytest.importorskip("pymer4.models")

        lmer = pymer4_models.Lmer
        monkeypatch.setattr(pymer4_models, "Lmer",
                            lambda formula, **kw: seen.append(formula) or lmer(formula, **kw))
    result = getattr(M, fit)(_frame(), text, engine=engine)
    assert seen == [rebuilt] and result.formula == rebuilt
    assert "item.speakers2" in [c.term for c in result.coefficients]


def test_a_long_product_is_refused_before_it_is_expanded():
    """k factors expand to 2**k - 1 terms: `item*item*...` within the length limit used to run
    for minutes in the web request (and 30 factors would exhaust memory)."""
    for factors in (5, 60):
        with pytest.raises(FormulaError, match="at most 4 factors"):
            parse_formula("rating ~ " + "*".join(["item"] * factors), ["item", "rating"])
    assert len(parse_formula("rating ~ a*b*c*d", ["a", "b", "c", "d", "rating"]).fixed) == 15
    many = " + ".join(f"c{i}" for i in range(70))
    with pytest.raises(FormulaError, match="more than 64 fixed-effect terms"):
        parse_formula("rating ~ " + many, [f"c{i}" for i in range(70)] + ["rating"])
