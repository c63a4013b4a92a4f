"""schemathesis against the live schema: every operation under /api/v1/, called over real HTTP
(pytest-django's live server) as a researcher with a token and seeded studies, must answer
without a 5xx and as its OpenAPI schema says (status code, content type, body schema).

Path parameters are drawn both from schemathesis (mostly unknown ids: the 404 path) and from
the seeded rows (the study slugs, small ids), so the success paths are exercised too.
SCHEMATHESIS_EXAMPLES sets the valid examples per operation (default 8; half as many
invalid ones, which must only avoid a 5xx).
"""

from __future__ import annotations

import os

import pytest
import schemathesis
from django.core.cache import cache
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from analysis.models import AnalysisRun
from evalstudy.models import Rater, Study
from evalstudy.services import assignment_next
from evalstudy.tokens import api_token_create
from metrics.models import MetricRun
from tests.factories import UserFactory, invite, make_study

EXAMPLES = int(os.environ.get("SCHEMATHESIS_EXAMPLES", "8"))
# The operations are split into shards, one test each, so that pytest-xdist spreads the two
# minutes of calls over the cores (operation i goes to shard i % SHARDS).
SHARDS = 4
CHECKS = [not_a_server_error, status_code_conformance, content_type_conformance,
          response_schema_conformance]


def _seed():
    researcher = UserFactory(username="researcher", is_staff=True)
    open_study = make_study(owner=researcher, status=Study.Status.OPEN, n_items=3,
                            n_systems=2)
    draft = make_study(owner=researcher, n_items=2, n_systems=2)
    assignment_next(study=open_study, rater=invite(open_study, display_name="Ann"))
    MetricRun.objects.create(study=open_study, status="done", metrics=["wer"])
    AnalysisRun.objects.create(study=open_study, status="done", result={"design": {}},
                               report_html="<html></html>", report_pdf=b"%PDF-1.4")
    _, key = api_token_create(user=researcher, name="schemathesis")
    # Ids of every seeded row: a path's {pk} then often names something that exists.
    ids = {pk for study in (open_study, draft) for pk in [
        study.pk, *study.items.values_list("pk", flat=True),
        *study.systems.values_list("pk", flat=True),
        *study.criteria.values_list("pk", flat=True),
        *study.assignments.values_list("pk", flat=True),
        *study.metric_runs.values_list("pk", flat=True),
        *study.analysis_runs.values_list("pk", flat=True),
        *Rater.objects.values_list("pk", flat=True)]}
    return [open_study.slug, draft.slug], sorted(ids), key


def _with_seeded_ids(operation, slugs, ids, mode=GenerationMode.POSITIVE):
    """The operation's cases, half of them with path parameters pointing at seeded rows."""
    names = {p.name for p in operation.path_parameters} if operation.path_parameters else set()
    if not names:
        return operation.as_strategy(generation_mode=mode)

    def seeded(args):
        case, slug, number, use_seed = args
        if use_seed:
            params = dict(case.path_parameters or {})
            for name in names:
                params[name] = slug if "slug" in name else number
            case.path_parameters = params
        return case

    return st.tuples(operation.as_strategy(generation_mode=mode), st.sampled_from(slugs),
                     st.sampled_from(ids), st.booleans()).map(seeded)


@pytest.mark.slow
@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("shard", range(SHARDS))
def test_every_operation_answers_without_5xx_and_as_documented(live_server, shard):
    cache.clear()
    slugs, ids, key = _seed()
    schema = schemathesis.openapi.from_url(f"{live_server.url}/api/v1/schema/")
    headers = {"Authorization": f"Token {key}"}
    failures, tested = [], []
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 10, f"the schema lists only {[o.label for o in operations]}"
    for operation in operations[shard::SHARDS]:
        tested.append(operation.label)

        @settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=True,
                  phases=[Phase.explicit, Phase.generate],
                  suppress_health_check=list(HealthCheck))
        @given(case=_with_seeded_ids(operation, slugs, ids))
        def run(case):
            case.call_and_validate(base_url=live_server.url, headers=headers, checks=CHECKS)

        # Invalid input (wrong types, missing fields, bad values): any 4xx, never a 5xx.
        @settings(max_examples=max(1, EXAMPLES // 2), deadline=None, database=None,
                  derandomize=True, phases=[Phase.explicit, Phase.generate],
                  suppress_health_check=list(HealthCheck))
        @given(case=_with_seeded_ids(operation, slugs, ids, GenerationMode.NEGATIVE))
        def run_negative(case):
            case.call_and_validate(base_url=live_server.url, headers=headers,
                                   checks=[not_a_server_error])

        for mode, test in (("valid", run), ("invalid", run_negative)):
            try:
                test()
            except Unsatisfiable:
                # Nothing in the operation can be made invalid (e.g. one free-text slug).
                assert mode == "invalid", f"{operation.label}: no valid input can be made"
            # schemathesis raises a FailureGroup (a BaseExceptionGroup) for check failures.
            except (Exception, BaseExceptionGroup) as error:  # noqa: BLE001 - one report
                failures.append(f"{operation.label} ({mode} input): {type(error).__name__}: "
                                f"{str(error)[:1500]}")
        cache.clear()  # throttles: each operation starts with a fresh budget
    assert tested, f"shard {shard} of {SHARDS} has no operation"
    assert not failures, f"{len(failures)} failure(s) in {len(tested)} operations:\n\n" + (
        "\n\n".join(failures))
