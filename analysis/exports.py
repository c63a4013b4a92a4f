"""Exports of a study's analysis: a finished run's report (HTML, PDF, JSON, tidy statistics CSV)
and the tidy judgment and error-span tables (CSV, JSONL, Parquet). Each is a service: it
returns the bytes to hand out and records the export in the audit trail (`actor`, `source`:
evalstudy.audit), so the API, the pages and `manage.py analyze` leave the same trail."""

from __future__ import annotations

import io
import json
from typing import Any

import pandas as pd

from evalstudy.audit import SYSTEM, audit_export
from evalstudy.models import Output, Study
from kit.csvsafe import SafeDictWriter, plain_cell

from .models import AnalysisRun
from .selectors import JudgmentFilter, judgments_tidy
from .stats import spans
from .stats.flatten import COLUMNS, statistics_rows

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


def spans_export(*, study: Study, filters: JudgmentFilter, fmt: str, file: str = "",
                 actor: Any = None, source: str = SYSTEM) -> bytes:
    """Every error span of the study's span criteria that `filters` keeps, one row per span:
    the judgment's rater, item, system and criterion, then side, start, end (character offsets
    into the text shown, end exclusive), the marked text, category, severity and its weight.
    Audited as "export" (what: spans)."""
    if fmt not in JUDGMENT_FORMATS:
        raise ValueError(f"span format {fmt!r}: one of {', '.join(JUDGMENT_FORMATS)}")
    judgments = judgments_tidy(study, filters)
    judgments = judgments[judgments["criterion_kind"] == "span"]
    parts = []
    for criterion in study.criteria.filter(kind="span"):
        rows = spans.span_rows(judgments[judgments["criterion"] == criterion.key],
                               criterion.rule.weights)
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
