"""Exports of a study's analysis: a finished run's report (HTML, PDF, JSON, tidy statistics CSV)
and the tidy judgment and error-span tables (CSV, JSONL, Parquet). Each is a service: it
returns the bytes to hand out and records the export in the audit trail (`actor`, `source`:
evalstudy.audit), so the API, the pages and `manage.py analyze` leave the same trail."""

from __future__ import annotations

import io
import json
from typing import TYPE_CHECKING, Any

from annotation.models import JudgmentRevision
from evalstudy.audit import SYSTEM, audit_export
from evalstudy.criteria import kinds_where, span_weights
from evalstudy.models import Output, Rater, Study
from kit.csvsafe import SafeDictWriter, plain_cell

from .models import AnalysisRun
from .selectors import JudgmentFilter, judgments_tidy, rater_labels
from .stats.flatten import COLUMNS, statistics_rows

if TYPE_CHECKING:  # pandas loads with the tables (1-2 s), not with every page
    import pandas as pd

REPORT_FORMATS = ("html", "pdf", "json", "stats_csv")
JUDGMENT_FORMATS = ("csv", "jsonl", "parquet")


class NotExported(Exception):
    """There is nothing to export in that format (an unfinished run, a run without a PDF)."""


def report_export(*, run: AnalysisRun, fmt: str, file: str = "", actor: Any = None,
                  source: str = SYSTEM) -> bytes:
    """A finished run's report as `fmt` (html, pdf, json, or stats_csv: every statistic as a
    tidy CSV), for `file` (blank: a download). Raises NotExported before it is done, or for a
    PDF the run did not make. Audited as "export"."""
    if fmt not in REPORT_FORMATS:
        raise ValueError(f"report format {fmt!r}: one of {', '.join(REPORT_FORMATS)}")
    if run.status != AnalysisRun.Status.DONE:
        raise NotExported("This analysis has no report yet.")
    if fmt == "html":
        body = run.report_html.encode()
    elif fmt == "pdf":
        if not run.report_pdf:
            raise NotExported("This analysis has no PDF.")
        body = bytes(run.report_pdf)
    elif fmt == "json":
        body = json.dumps(run.result, indent=1).encode()
    else:
        text = io.StringIO()
        writer = SafeDictWriter(text, fieldnames=COLUMNS)
        writer.writeheader()
        for row in statistics_rows(run.result):
            writer.writerow(row)
        body = text.getvalue().encode()
    audit_export(actor=actor, source=source, what="analysis report", fmt=fmt, study=run.study,
                 target=run, file=file)
    return body


def judgments_export(*, study: Study, filters: JudgmentFilter, fmt: str, file: str = "",
                     actor: Any = None, source: str = SYSTEM) -> bytes:
    """Every judgment `filters` keeps as a tidy table (one row per rater x slot x criterion,
    with item and system metadata) in `fmt`: CSV (formula-like cells neutralised), JSONL or
    Parquet. Audited as "export" with the row count."""
    if fmt not in JUDGMENT_FORMATS:
        raise ValueError(f"judgment format {fmt!r}: one of {', '.join(JUDGMENT_FORMATS)}")
    frame = judgments_tidy(study, filters)
    body = _table_bytes(frame, fmt)
    audit_export(actor=actor, source=source, what="judgments", fmt=fmt, target=study,
                 file=file, rows=len(frame))
    return body


# The columns of a browser download (`judgments_browse_export`): the tidy table's keys, every
# slot kind (practice items and attention checks too: `item` is then the control item's key),
# and each judgment's revisions.
BROWSE_COLUMNS = (
    "judgment", "rater", "rater_id", "rater_kind", "seat", "slot", "slot_kind", "position",
    "item", "output", "system", "output_b", "system_b", "shown", "criterion",
    "criterion_kind", "value", "numeric", "revision", "earlier_values", "served_at",
    "submitted_at", "seconds",
)


def judgments_browse_export(*, study: Study, judgments: Any, filters: dict[str, str], fmt: str,
                            file: str = "", actor: Any = None, source: str = SYSTEM) -> bytes:
    """The judgments of the judgment browser's filter (`judgments`: a queryset of `study`'s
    judgments, filtered in the database by analysis.browser) as a table of BROWSE_COLUMNS in
    `fmt`: CSV (formula-like cells neutralised), JSONL or Parquet, through the same writers
    as `judgments_export`. `earlier_values` lists the values a revision replaced, oldest
    first (JSON). Audited as "export" (what: judgments) with the filter and the row count."""
    if fmt not in JUDGMENT_FORMATS:
        raise ValueError(f"judgment format {fmt!r}: one of {', '.join(JUDGMENT_FORMATS)}")
    frame = _browse_frame(study, judgments)
    body = _table_bytes(frame, fmt)
    audit_export(actor=actor, source=source, what="judgments", fmt=fmt, target=study,
                 file=file, rows=len(frame), filters=dict(filters))
    return body


def _browse_frame(study: Study, judgments: Any) -> pd.DataFrame:
    """BROWSE_COLUMNS of `judgments`, in a fixed number of queries (rows, revisions, raters,
    and the outputs of tuple slots when there are any)."""
    import pandas as pd

    rows = list(judgments.order_by("submitted_at", "id").values_list(
        "id", "rater_id", "rater__kind", "slot__assignment_id", "slot_id", "slot__kind",
        "slot__position", "slot__output__item__external_id", "slot__calibration_item__key",
        "slot__attention_check__key", "slot__output_id", "slot__output__system__name",
        "slot__output_b_id", "slot__output_b__system__name", "slot__shown_outputs",
        "criterion__key", "criterion__kind", "value", "numeric_value", "revision",
        "served_at", "submitted_at"))
    ids = [row[0] for row in rows]
    earlier: dict[int, list[str]] = {}
    revised = [row[0] for row in rows if row[19]]
    for judgment_id, value in (JudgmentRevision.objects.filter(judgment_id__in=revised)
                               .order_by("replaced_at", "id").values_list("judgment_id", "value")
                               if revised else ()):
        earlier.setdefault(judgment_id, []).append(value)
    names = rater_labels({pk: str(r) for pk, r in Rater.objects.in_bulk(
        {row[1] for row in rows}).items()}) if ids else {}
    shown_ids = {pk for row in rows for pk in (row[14] or [])}
    systems = dict(Output.objects.filter(pk__in=shown_ids).values_list("id", "system__name")
                   ) if shown_ids else {}
    records = []
    for (pk, rater, rater_kind, seat, slot, kind, position, item, calibration, attention,
         output, system, output_b, system_b, shown, criterion, criterion_kind, value, numeric,
         revision, served, submitted) in rows:
        records.append((
            pk, names.get(rater, str(rater)), rater, rater_kind, seat, slot, kind, position,
            item or calibration or attention, output, system, output_b, system_b,
            json.dumps([systems.get(o) for o in shown]) if shown else None, criterion,
            criterion_kind, value, numeric, revision,
            json.dumps(earlier[pk], ensure_ascii=False) if pk in earlier else None, served,
            submitted,
            (submitted - served).total_seconds() if served and submitted else None))
    frame = pd.DataFrame.from_records(records, columns=list(BROWSE_COLUMNS))
    for column in ("served_at", "submitted_at"):
        frame[column] = pd.to_datetime(frame[column], utc=True)
    return frame


def spans_export(*, study: Study, filters: JudgmentFilter, fmt: str, file: str = "",
                 actor: Any = None, source: str = SYSTEM) -> bytes:
    """Every error span of the study's span criteria that `filters` keeps, one row per span:
    the judgment's rater, item, system and criterion, then side, start, end (character offsets
    into the text shown, end exclusive), the marked text, category, severity and its weight.
    Audited as "export" (what: spans)."""
    if fmt not in JUDGMENT_FORMATS:
        raise ValueError(f"span format {fmt!r}: one of {', '.join(JUDGMENT_FORMATS)}")
    import pandas as pd

    from .stats import spans  # its agreement statistics import scipy: loaded when exporting

    judgments = judgments_tidy(study, filters)
    # The kinds whose answers are error spans: those the span statistics analyse.
    span_kinds = kinds_where(lambda kind: "spans" in kind.analysis)
    judgments = judgments[judgments["criterion_kind"].isin(span_kinds)]
    parts = []
    for criterion in study.criteria.filter(kind__in=span_kinds):
        rows = spans.span_rows(judgments[judgments["criterion"] == criterion.key],
                               span_weights(criterion.rule))
        parts.append(rows.assign(criterion=criterion.key))
    frame = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame(
        columns=["judgment", "rater", "item", "system", "side", "start", "end", "category",
                 "severity", "weight", "criterion"])
    texts = dict(Output.objects.filter(item__study=study).values_list("id", "text"))
    references = dict(Output.objects.filter(item__study=study)
                      .values_list("id", "item__reference"))
    frame["text"] = [
        (texts if side == "output" else references).get(output, "")[start:end]
        for output, side, start, end in zip(frame.get("output", []), frame["side"],
                                            frame["start"], frame["end"], strict=True)]
    body = _table_bytes(frame, fmt)
    audit_export(actor=actor, source=source, what="spans", fmt=fmt, target=study, file=file,
                 rows=len(frame))
    return body


def _table_bytes(frame: pd.DataFrame, fmt: str) -> bytes:
    """A tidy table as CSV (formula-like cells neutralised), JSONL or Parquet."""
    if fmt == "parquet":
        return _parquet(frame)
    columns = list(frame.columns)
    records = ({name: plain_cell(value) for name, value in zip(columns, row, strict=True)}
               for row in frame.itertuples(index=False, name=None))
    text = io.StringIO()
    if fmt == "csv":
        writer = SafeDictWriter(text, fieldnames=columns)
        writer.writeheader()
        for record in records:
            writer.writerow(record)
    else:
        for record in records:
            text.write(json.dumps(record, ensure_ascii=False) + "\n")
    return text.getvalue().encode()


def _parquet(frame: pd.DataFrame) -> bytes:
    frame = frame.copy()
    for name in frame.columns:
        if frame[name].dtype == object:
            # Metadata columns may mix numbers and text; Parquet columns have one type.
            kinds = {type(v) for v in frame[name] if plain_cell(v) is not None}
            if len(kinds) > 1 or (kinds and not kinds <= {str}):
                frame[name] = frame[name].map(
                    lambda v: None if plain_cell(v) is None else v if isinstance(v, str) else
                    json.dumps(plain_cell(v)))
    buffer = io.BytesIO()
    frame.to_parquet(buffer, engine="pyarrow", index=False)
    return buffer.getvalue()
