"""The blindness audit of a study's outputs (evalstudy.blindness), for scripts: the summary
and every hit, paginated."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema, inline_serializer
from rest_framework import serializers

from kit.openapi import PAGE_PARAMETERS, READ_ERRORS

from ..blindness import hit_dict
from ..selectors import study_blindness_audit
from .base import StudyScopedView

# Annotated: left to infer, the mix of field classes joins to `object`.
HIT_FIELDS: dict[str, serializers.Field] = {
    "output": serializers.IntegerField(),
    "item": serializers.CharField(allow_blank=True),
    "system": serializers.CharField(allow_blank=True),
    "term": serializers.CharField(allow_blank=True),
    "kind": serializers.ChoiceField(["system name", "alias", "study term", "built-in",
                                     "boilerplate"]),
    "names_system": serializers.CharField(allow_null=True, allow_blank=True),
    "before": serializers.CharField(allow_blank=True),
    "match": serializers.CharField(allow_blank=True),
    "after": serializers.CharField(allow_blank=True),
    "snippet": serializers.CharField(allow_blank=True),
    "shares": serializers.DictField(child=serializers.FloatField()),
}
AUDIT_FIELDS: dict[str, serializers.Field] = {
    "count": serializers.IntegerField(),
    "next": serializers.URLField(allow_null=True),
    "previous": serializers.URLField(allow_null=True),
    "results": inline_serializer("BlindnessHit", fields=HIT_FIELDS, many=True),
    "summary": serializers.DictField(),
}
AUDIT = inline_serializer("BlindnessAudit", fields=AUDIT_FIELDS)


class StudyBlindness(StudyScopedView):
    """Which outputs may reveal their system: `summary` (outputs flagged per system, hits per
    term, names not searched for and why, boilerplate phrases with each system's share) and
    the hits (`results`, one per place in an output, with a plain-text snippet). Computed
    from the outputs as they are now."""

    @extend_schema(operation_id="studies_blindness_retrieve",
                   responses={200: AUDIT, **READ_ERRORS}, parameters=PAGE_PARAMETERS)
    def get(self, request, slug):
        audit = study_blindness_audit(self.get_study())
        page = self.paginator.paginate_queryset(audit.hits, request, view=self)
        response = self.paginator.get_paginated_response([hit_dict(hit) for hit in page])
        response.data["summary"] = audit.summary()
        return response
