"""The researcher's pages of a study that need only the study's own data: the blindness
audit (which outputs may reveal their system)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from django.contrib.admin.views.decorators import staff_member_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render

from .blindness import BUILT_IN_TERMS, Audit
from .permissions import VIEWER, study_for
from .selectors import study_blindness_audit

#: Snippets shown per system and term (the rest are counted; the API lists them all).
SNIPPETS_SHOWN = 20


def _groups(audit: Audit) -> list[dict[str, Any]]:
    """Per system: its counts and its terms, each with its first snippets."""
    hits: dict[tuple[str, str, str], list[Any]] = defaultdict(list)
    for hit in audit.hits:
        hits[(hit.system, hit.term, hit.kind)].append(hit)
    terms: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in audit.by_term():
        found = hits[(row["system"], row["term"], row["kind"])]
        terms[row["system"]].append({**row, "hits": found[:SNIPPETS_SHOWN],
                                     "more": max(0, len(found) - SNIPPETS_SHOWN)})
    return [{**row, "terms": terms.get(row["system"], [])}
            for row in audit.summary()["systems"]]


@staff_member_required
def blindness_page(request: HttpRequest, slug: str) -> HttpResponse:
    study = study_for(request.user, slug, VIEWER)
    audit = study_blindness_audit(study)
    return render(request, "evalstudy/blindness.html", {
        "study": study, "audit": audit, "summary": audit.summary(), "groups": _groups(audit),
        "built_in_words": [text for text, phrase in BUILT_IN_TERMS if not phrase],
        "built_in_phrases": [text for text, phrase in BUILT_IN_TERMS if phrase],
        "snippets_shown": SNIPPETS_SHOWN,
    })
