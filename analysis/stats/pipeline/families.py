"""The families of the analysis: what the report computes for a criterion, chosen by its kind
(no Django here).

A kind lists the families that analyse it (`AnswerKind.analysis`, in report order); each name
is registered here once, with the step it belongs to:

- `criterion` families fill one criterion's entry of the report (`analyse_criterion`): its
  descriptives and models, agreement, the human ceiling;
- `validity` families add one entry to the report's `validity` list (`analyse`): metrics and
  proxies against the humans on that criterion.

A new family is one function here under `@family(name, step)`, and its name in the kinds that
it analyses; nothing in the pipeline names a kind.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Literal

import pandas as pd

from evalstudy.criteria import KINDS, MQM_DEFAULT_WEIGHTS, PAIR, AnswerKind, binary_label, kind_of
from kit.jsonable import to_jsonable

from .. import descriptives, models, rankings, spans
from ..formulas import criterion_formula, model_frame
from ..votes import graded_entry, pairwise_entry, with_counted_votes
from .proxy_validity import proxy_validity
from .rater_agreement import (
    declared_categories,
    human_ceiling,
    interval_agreement,
    rater_agreement,
    rater_keys,
    unit_keys,
)
from .sections import Progress, news, run_section, silent

Step = Literal["criterion", "validity"]


@dataclass
class CriterionAnalysis:
    """What a `criterion` family reads and where it writes: one criterion's rows (`rows`: every
    rater, with their `unit`; `humans`: the human raters'), its user formula (None: the
    default model), and the `result` entry its sections go to."""

    criterion: dict[str, Any]
    kind: AnswerKind | None  # None for a kind this version does not know: counted only
    rows: pd.DataFrame
    humans: pd.DataFrame
    result: dict[str, Any]
    options: dict[str, Any]
    warnings: list[str]
    formula: str | None
    fits: dict[str, Any] = field(default_factory=dict)  # fitted models, for their contrasts
    progress: Progress = silent

    @property
    def key(self) -> str:
        return self.criterion["key"]

    @property
    def engine(self) -> str:
        return self.options.get("engine", "auto")

    def section(self, name: str, compute: Callable[[], Any]) -> None:
        news(self.progress, f"criterion {self.key}: {name}")
        run_section(self.result, name, self.warnings, compute)

    def fit_news(self, model: str) -> Callable[[int], None]:
        """A fit's per-iteration callback, heard as news of this criterion's step."""
        return lambda iteration: news(self.progress,
                                      f"criterion {self.key}: {model}, iteration {iteration}")


@dataclass
class ValidityAnalysis:
    """What a `validity` family reads: the whole study's tables and one criterion."""

    judgments: pd.DataFrame
    votes: pd.DataFrame
    metrics: pd.DataFrame | None
    criterion: dict[str, Any]
    options: dict[str, Any]
    warnings: list[str]
    progress: Progress

    @property
    def key(self) -> str:
        return self.criterion["key"]

    def rows(self) -> pd.DataFrame:
        return self.judgments[self.judgments["criterion"] == self.key]

    def counted(self) -> pd.DataFrame:
        return self.votes[self.votes["criterion"] == self.key]


@dataclass(frozen=True)
class Family:
    name: str
    step: Step
    run: Callable[[Any], Any]


#: Every family by name: the one registry the pipeline dispatches on.
FAMILIES: dict[str, Family] = {}


def family(name: str, step: Step) -> Callable[[Callable[[Any], Any]], Callable[[Any], Any]]:
    """Registers the decorated function as the family `name` of `step`."""
    def register(run: Callable[[Any], Any]) -> Callable[[Any], Any]:
        if name in FAMILIES:
            raise TypeError(f"two analysis families are named {name!r}")
        FAMILIES[name] = Family(name, step, run)
        return run
    return register


def families_of(kind: AnswerKind | None, step: Step) -> list[Family]:
    """The families of `step` that analyse `kind`, in its order (ValueError naming a family a
    kind lists but nothing registers)."""
    if kind is None:
        return [FAMILIES["counted"]] if step == "criterion" else []
    unknown = [name for name in kind.analysis if name not in FAMILIES]
    if unknown:
        raise ValueError(f"answer kind {kind.name!r} names analysis families that do not "
                         f"exist: {', '.join(unknown)} (known: {', '.join(FAMILIES)})")
    return [FAMILIES[name] for name in kind.analysis if FAMILIES[name].step == step]


def kind_or_none(name: str) -> AnswerKind | None:
    return kind_of(name) if name in KINDS else None


# --- one criterion ---------------------------------------------------------------------------

def analyse_criterion(rows: pd.DataFrame, criterion: dict[str, Any], options: dict[str, Any],
                      warnings: list[str], progress: Progress = silent) -> dict[str, Any]:
    """One criterion's statistics: the `criterion` families of its kind, in order. A user
    formula (see `criterion_formula`) is parsed here against the rows' columns and only its
    rebuilt text reaches the models; a bad one raises FormulaError (`analyse` checks every
    formula before it starts)."""
    kind_name, key = criterion["kind"], criterion["key"]
    kind = kind_or_none(kind_name)
    parsed = criterion_formula(options, criterion, rows.columns)
    formula = parsed.text if parsed is not None else None
    rows = rows.copy()
    rows["unit"] = unit_keys(rows, kind is not None and kind.shows == PAIR)
    humans = rows[rows["is_human"]]
    result: dict[str, Any] = {
        "key": key, "kind": kind_name, "n_judgments": int(len(humans)),
        "n_raters": int(humans["rater"].nunique()), "n_outputs": int(humans["unit"].nunique()),
        "n_items": int(humans["item"].nunique()),
    }
    if humans.empty:
        return result
    if formula is None and humans["system"].nunique() < 2:
        warnings.append(f"{key}: one system only: the default models have no system term "
                        "(intercept and random effects), describing that system alone")
    analysis = CriterionAnalysis(criterion, kind, rows, humans, result, options, warnings,
                                 formula, progress=progress)
    for found in families_of(kind, "criterion"):
        found.run(analysis)
    return result


@family("ordinal", "criterion")
def ordered_points(a: CriterionAnalysis) -> None:
    """Ordered points (Likert): descriptives, the distribution, the cumulative link models
    and their contrasts, separation."""
    ratings = pd.to_numeric(a.humans["value"])
    frame = model_frame(a.humans, "rating", ratings)
    levels = {"rating": list(range(1, int(a.criterion.get("scale_points") or 5) + 1))}
    fits = a.fits
    a.section("descriptives",
              lambda: descriptives.likert_summary(frame, value="rating", by="system"))
    a.section("distribution",
              lambda: frame.groupby(["system", "rating"]).size().rename("n").reset_index())
    a.section("clmm", lambda: fits.setdefault("clmm", models.fit_clmm(
        frame, a.formula or models.for_frame(models.DEFAULT_CLMM_FORMULA, frame), levels=levels,
        engine=a.engine, progress=a.fit_news("CLMM"))))
    a.section("clm", lambda: models.fit_clm(
        frame, models.for_frame(models.DEFAULT_CLM_FORMULA, frame), levels=levels,
        engine=a.engine))
    if frame["system"].nunique() > 2 and "clmm" in fits:
        a.section("contrasts", lambda: models.pairwise_contrasts(fits["clmm"], "system"))
    if "clmm" in fits:
        # Diagnosed on every fit; no penalised ordinal model is offered.
        a.result["separation"] = to_jsonable(models.separation_report(
            fits["clmm"], option=a.options.get("separation", "auto"), key="clmm"))
        if a.result["separation"]["detected"]:
            a.warnings.append(f"{a.key}: {a.result['separation']['diagnosis']}")


@family("binomial", "criterion")
def binary_decisions(a: CriterionAnalysis) -> None:
    """Answers read as a binary decision: proportions, the binomial mixed model (and its
    penalised fit under separation) and contrasts."""
    kind_name = a.criterion["kind"]
    y = a.humans["value"].map(lambda v: binary_label(kind_name, str(v)))
    frame = model_frame(a.humans, "y", y)
    fits = a.fits
    a.section("proportions",
              lambda: descriptives.proportion_summary(frame, value="y", by="system"))
    a.section("glmm", lambda: fits.setdefault("glmm", models.fit_binomial_glmm(
        frame, a.formula or models.for_frame(models.DEFAULT_GLMM_FORMULA, frame),
        engine=a.engine)))
    # Separation (a system at 0% or 100% "yes"): glmer's estimates for it are infinite, so
    # the penalised fit is added (option separation: auto, penalised, off) and both are
    # reported, each saying what it is; every contrast carries its fit's warnings.
    separation = a.options.get("separation", "auto")
    if "glmm" in fits and models.wants_penalised(fits["glmm"], separation):
        a.section("glmm_penalised", lambda: fits.setdefault(
            "glmm_penalised", models.fit_binomial_penalised(
                frame, a.formula or models.for_frame(models.DEFAULT_GLMM_FORMULA, frame))))
    for name, section in (("glmm", "contrasts"), ("glmm_penalised", "contrasts_penalised")):
        if frame["system"].nunique() > 2 and name in fits:
            a.section(section, partial(models.pairwise_contrasts, fits[name], "system"))
    if "glmm" in fits:
        failed = a.result.get("glmm_penalised")
        a.result["separation"] = to_jsonable(models.separation_report(
            fits["glmm"], option=separation, key="glmm",
            penalised=fits.get("glmm_penalised"), penalised_key="glmm_penalised",
            penalised_error=failed.get("error") if isinstance(failed, dict) else None))
        if a.result["separation"]["detected"]:
            a.warnings.append(f"{a.key}: {a.result['separation']['diagnosis']} "
                              f"({a.result['separation']['note']})")


@family("severity_levels", "criterion")
def severity_levels(a: CriterionAnalysis) -> None:
    """How often each severity level was given, per system."""
    a.section("severity_levels",
              lambda: descriptives.severity_distribution(a.humans, a.criterion.get("labels")))


@family("preference", "criterion")
def preference(a: CriterionAnalysis) -> None:
    """A choice between two outputs: the preference model (Bradley-Terry, position effect)."""
    frame = pd.DataFrame({"left_system": a.humans["system"],
                          "right_system": a.humans["system_b"],
                          "choice": a.humans["value"], "rater": a.humans["rater"]})
    a.section("preference", lambda: models.preference_model(frame, cluster="rater"))


@family("categories", "criterion")
def categories(a: CriterionAnalysis) -> None:
    """Declared categories: their distribution per system, and a classification summary
    when the options are TP/FP/FN."""
    humans = a.humans
    a.section("distribution",
              lambda: humans.groupby(["system", "value"]).size().rename("n").reset_index())
    options_set = {str(o).upper() for o in a.criterion.get("options") or []}
    if {"TP", "FP", "FN"} <= options_set:
        frame = humans.assign(label=humans["value"].str.upper())
        a.section("classification", lambda: descriptives.classification_summary(
            frame, label="label", by="system"))


@family("agreement", "criterion")
def agreement_on_scale(a: CriterionAnalysis) -> None:
    """Agreement among the human raters on the criterion's declared scale."""
    scale = declared_categories(a.criterion)
    a.section("agreement", lambda: rater_agreement(a.rows, a.criterion["kind"], scale))


@family("ceiling", "criterion")
def ceiling(a: CriterionAnalysis) -> None:
    """The leave-one-rater-out human ceiling, proxies scored against the same references."""
    scale = declared_categories(a.criterion)
    a.section("ceiling", lambda: human_ceiling(a.rows, a.criterion["kind"], scale,
                                               a.options.get("proxy_raters")))


@family("slider", "criterion")
def continuous_score(a: CriterionAnalysis) -> None:
    """A continuous score (direct assessment): its summary, the linear mixed model and its
    contrasts, interval agreement."""
    humans = a.humans
    frame = model_frame(humans, "score", pd.to_numeric(humans["value"]).astype(float))
    fits = a.fits
    # A penalty (a count of errors) is better the lower it is: its systems come lowest first.
    lower = kind_of(a.criterion["kind"]).score == "penalty"
    a.section("slider", lambda: descriptives.slider_summary(frame, value="score", by="system",
                                                            lower_is_better=lower))
    a.section("lmm", lambda: fits.setdefault("lmm", models.fit_lmm(
        frame, a.formula or models.for_frame(models.DEFAULT_LMM_FORMULA, frame),
        engine=a.engine)))
    if frame["system"].nunique() > 2 and "lmm" in fits:
        a.section("contrasts", lambda: models.pairwise_contrasts(fits["lmm"], "system"))
    key, _ = rater_keys(humans)
    a.section("agreement", lambda: interval_agreement(pd.DataFrame({
        "unit": humans["unit"], "rater": humans[key],
        "value": pd.to_numeric(humans["value"]).astype(float), "item": humans["item"]})))


@family("spans", "criterion")
def error_spans(a: CriterionAnalysis) -> None:
    """Error spans (MQM, ESA): the weighted penalty per system and span agreement."""
    weights = a.criterion.get("severity_weights") or dict(MQM_DEFAULT_WEIGHTS)
    a.section("mqm", lambda: spans.mqm_summary(a.humans, weights))
    sides = ("output", "reference") if a.criterion.get("span_reference") else ("output",)
    a.section("span_agreement", lambda: spans.span_agreement(a.humans, sides=sides))


@family("ranks", "criterion")
def ranks(a: CriterionAnalysis) -> None:
    """Rankings of a tuple of outputs: mean ranks and the Plackett-Luce model."""
    ordered = rankings.rankings_of(a.humans)
    a.section("ranks", lambda: rankings.rank_summary(ordered))
    a.section("plackett_luce", lambda: rankings.plackett_luce(ordered))


@family("best_worst", "criterion")
def best_worst(a: CriterionAnalysis) -> None:
    """Best-worst scaling: each system's best-minus-worst score."""
    a.section("best_worst", lambda: rankings.bws_scores(a.humans))


@family("counted", "criterion")
def counted(a: CriterionAnalysis) -> None:
    """Free text: how many answers were given; nothing is modelled."""
    a.result["answered"] = int((a.humans["value"].str.strip() != "").sum())


# --- metrics and proxies against the humans --------------------------------------------------

def analyse_validity(judgments: pd.DataFrame, votes: pd.DataFrame,
                     metrics: pd.DataFrame | None, criterion: dict[str, Any],
                     options: dict[str, Any], warnings: list[str],
                     progress: Progress) -> list[dict[str, Any]]:
    """The `validity` entries of one criterion: one per validity family of its kind."""
    analysis = ValidityAnalysis(judgments, votes, metrics, criterion, options, warnings,
                                progress)
    entries = []
    for found in families_of(kind_or_none(criterion["kind"]), "validity"):
        entries.append(found.run(analysis))
    return entries


def _entry(a: ValidityAnalysis, step: str, compute: Callable[[], Any]) -> Any:
    a.progress(f"{step} on {a.key}")
    found: dict[str, Any] = {}
    run_section(found, "result", a.warnings, compute)
    return found["result"]


@family("pairwise_validity", "validity")
def pairwise_validity(a: ValidityAnalysis) -> Any:
    """Metrics and proxy raters against the majority of everyone on a choice of two outputs."""
    return _entry(a, "metrics and proxies vs humans", partial(
        pairwise_entry, a.rows(), a.counted(), a.metrics, a.criterion,
        a.options.get("proxy_raters")))


@family("graded_validity", "validity")
def graded_validity(a: ValidityAnalysis) -> Any:
    """Metrics and proxy raters against the humans' graded scores."""
    return _entry(a, "metrics and proxies vs humans", partial(
        graded_entry, a.rows(), a.counted(), a.metrics, a.criterion, a.options))


@family("binary_validity", "validity")
def binary_validity(a: ValidityAnalysis) -> Any:
    """Metrics and proxies against the human binary label (see `proxy_validity`)."""
    return _entry(a, "proxies vs humans", partial(
        proxy_validity, with_counted_votes(a.judgments, a.votes, a.key), a.criterion,
        a.metrics, a.options, a.warnings))
