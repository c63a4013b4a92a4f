"""Soft labels: per unit (an output, or a pair of outputs) and criterion, the distribution over
the criterion's options that Dawid-Skene and MACE infer from the raters' answers without gold
labels (analysis.stats.truth), beside the plain vote shares; exported as CSV (one row per unit
and option, formula-like cells neutralised) or JSONL (one object per unit).

Read from the human judgments an analysis reads by default (target slots, raters the
researcher excluded left out); proxies are not raters here. Criteria with a closed set of
options only (binary, severity, likert, categorical, pairwise); each model is fitted on one
criterion's units at once, the options in the criterion's own order (`CriterionRule.choices`,
so an option nobody chose still gets its probability). A pair is read with the lower output id
as A (an answer given the other way round is turned around).
"""

from __future__ import annotations

import io
import json
from typing import Any

from evalstudy.audit import SYSTEM, audit_export
from evalstudy.criteria import PAIR, kinds_where, pair_oriented
from evalstudy.models import Output, Study
from kit.csvsafe import SafeDictWriter

from .selectors import JudgmentFilter, judgments_tidy
from .stats.truth import soft_labels

SOFT_LABEL_FORMATS = ("csv", "jsonl")
#: The kinds whose answers are one of a declared list of categories (what the soft labels are
#: probabilities over).
SOFT_LABEL_KINDS = kinds_where(lambda kind: kind.closed)
CSV_COLUMNS = ("criterion", "criterion_kind", "item", "output", "system", "output_b",
               "system_b", "n_judgments", "option", "votes", "dawid_skene", "mace")


def soft_label_rows(study: Study) -> list[dict[str, Any]]:
    """One dict per unit and criterion: keys criterion, criterion_kind, item, output, system,
    output_b, system_b, n_judgments, options (in the criterion's order), votes, dawid_skene,
    mace (each {option: probability}, summing to 1)."""
    criteria = list(study.criteria.filter(kind__in=SOFT_LABEL_KINDS).order_by("order", "id"))
    if not criteria:
        return []
    table = judgments_tidy(study, JudgmentFilter(raters="human"))
    outputs = {pk: (item, system) for pk, item, system in Output.objects.filter(
        item__study=study).values_list("id", "item__external_id", "system__name")}
    rows: list[dict[str, Any]] = []
    for criterion in criteria:
        choices = criterion.rule.choices() or []
        part = table[table["criterion"] == criterion.key]
        triples = []
        for output, output_b, rater, value in zip(part["output"], part["output_b"],
                                                  part["rater_id"], part["value"], strict=True):
            if criterion.rule.spec.shows == PAIR:
                second = None if output_b is None or output_b != output_b else int(output_b)
                unit, value = pair_oriented(int(output), second, str(value))
            else:
                unit = (int(output), None)
            triples.append((unit, int(rater), str(value)))
        for label in soft_labels(triples, choices):
            output, output_b = label.unit  # type: ignore[misc]
            item, system = outputs.get(output, ("", ""))
            rows.append({
                "criterion": criterion.key, "criterion_kind": criterion.kind, "item": item,
                "output": output, "system": system, "output_b": output_b,
                "system_b": outputs.get(output_b, ("", ""))[1] if output_b else None,
                "n_judgments": label.n_judgments, "options": list(choices),
                "votes": label.votes, "dawid_skene": label.dawid_skene, "mace": label.mace})
    return rows


def soft_labels_export(*, study: Study, fmt: str, file: str = "", actor: Any = None,
                       source: str = SYSTEM) -> bytes:
    """The study's soft labels as CSV (long: one row per unit and option; cells that a
    spreadsheet would read as a formula neutralised) or JSONL (one object per unit).
    Audited as "export" (what: soft labels) with the row count."""
    if fmt not in SOFT_LABEL_FORMATS:
        raise ValueError(f"soft-label format {fmt!r}: one of {', '.join(SOFT_LABEL_FORMATS)}")
    rows = soft_label_rows(study)
    text = io.StringIO()
    if fmt == "csv":
        writer = SafeDictWriter(text, fieldnames=list(CSV_COLUMNS))
        writer.writeheader()
        for row in rows:
            for option in row["options"]:
                writer.writerow({
                    **{name: row[name] for name in CSV_COLUMNS[:8]}, "option": option,
                    "votes": round(row["votes"][option], 6),
                    "dawid_skene": round(row["dawid_skene"][option], 6),
                    "mace": round(row["mace"][option], 6)})
    else:
        for row in rows:
            text.write(json.dumps(row, ensure_ascii=False) + "\n")
    audit_export(actor=actor, source=source, what="soft labels", fmt=fmt, target=study,
                 file=file, rows=len(rows))
    return text.getvalue().encode()
