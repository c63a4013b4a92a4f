"""Every REST route, mounted at /api/v1/ by config/urls.py (no namespace: the URL names, e.g.
`api-metric-run`, are used by serializers and tests as they are).

A new route must also get a row in tests/test_api_permissions.py, whose matrix enumerates this
resolver and fails on a route it does not know.
"""

from csp.decorators import csp_update
from django.urls import path
from drf_spectacular.views import SpectacularAPIView, SpectacularSwaggerSplitView
from rest_framework.permissions import AllowAny

from analysis import api as analysis_api
from annotation import api as rater_api
from evalstudy.api import blindness as blindness_api
from evalstudy.api import content as content_api
from evalstudy.api import media as media_api
from evalstudy.api import people as people_api
from evalstudy.api import plans as plans_api
from evalstudy.api import studies as studies_api
from metrics import api as metrics_api
from prolific import api as prolific_api
from proxies import api as proxy_api
from proxies import api_judge_versions as judge_versions_api

STUDY = "studies/<slug:slug>/"
DOCS_CSP = csp_update({"style-src": ["'unsafe-inline'"], "worker-src": ["blob:"]})

urlpatterns = [
    # Schema and docs: public (they describe the API, not any data).
    path("schema/", SpectacularAPIView.as_view(permission_classes=[AllowAny],
                                               authentication_classes=[]),
         name="api-schema"),
    # Swagger UI from the sidecar package (no CDN); its page needs inline styles and a blob
    # worker, allowed on this page only.
    path("docs/", DOCS_CSP(SpectacularSwaggerSplitView.as_view(
        url_name="api-schema", permission_classes=[AllowAny], authentication_classes=[])),
        name="api-docs"),
    path("auth/token/", people_api.TokenObtain.as_view(), name="api-token"),
    # Studies
    path("studies/", studies_api.StudyList.as_view(), name="api-studies"),
    path("studies/import/", studies_api.StudyImport.as_view(), name="api-study-import"),
    path(STUDY, studies_api.StudyDetail.as_view(), name="api-study"),
    path(STUDY + "open/", studies_api.StudyOpen.as_view(), name="api-study-open"),
    path(STUDY + "close/", studies_api.StudyClose.as_view(), name="api-study-close"),
    path(STUDY + "progress/", rater_api.StudyProgress.as_view(), name="api-study-progress"),
    # Researchers' actions on a rater of the study (live quality control)
    path(STUDY + "raters/<int:pk>/exclude/", rater_api.RaterExclude.as_view(),
         name="api-study-rater-exclude"),
    path(STUDY + "raters/<int:pk>/include/", rater_api.RaterInclude.as_view(),
         name="api-study-rater-include"),
    path(STUDY + "raters/<int:pk>/reopen-seat/", rater_api.RaterReopenSeat.as_view(),
         name="api-study-rater-reopen-seat"),
    path(STUDY + "raters/<int:pk>/recalibrate/", rater_api.RaterRecalibrate.as_view(),
         name="api-study-rater-recalibrate"),
    path(STUDY + "systems/", studies_api.SystemList.as_view(), name="api-study-systems"),
    path(STUDY + "items/", content_api.ItemList.as_view(), name="api-study-items"),
    path(STUDY + "outputs/", content_api.OutputList.as_view(), name="api-study-outputs"),
    path(STUDY + "items/<str:external_id>/media/", media_api.ItemMediaView.as_view(),
         name="api-study-item-media"),
    path(STUDY + "criteria/", studies_api.CriterionList.as_view(), name="api-study-criteria"),
    path(STUDY + "blindness/", blindness_api.StudyBlindness.as_view(),
         name="api-study-blindness"),
    path(STUDY + "plan/", plans_api.StudyPlanView.as_view(), name="api-study-plan"),
    path(STUDY + "plan/checks/", plans_api.StudyPlanChecks.as_view(),
         name="api-study-plan-checks"),
    path(STUDY + "design.csv", content_api.DesignCsv.as_view(), name="api-study-design"),
    path(STUDY + "collaborators/", people_api.CollaboratorList.as_view(),
         name="api-study-collaborators"),
    path(STUDY + "collaborators/<str:username>/", people_api.CollaboratorDetail.as_view(),
         name="api-study-collaborator"),
    path(STUDY + "raters/", people_api.RaterList.as_view(), name="api-study-raters"),
    path(STUDY + "raters/<int:pk>/personal-data/", people_api.RaterPersonalData.as_view(),
         name="api-study-rater-personal-data"),
    path(STUDY + "raters/<int:pk>/erase/", people_api.RaterErase.as_view(),
         name="api-study-rater-erase"),
    # Exports
    path(STUDY + "judgments.csv", analysis_api.JudgmentsExport.as_view(fmt="csv"),
         name="api-study-judgments-csv"),
    path(STUDY + "judgments.jsonl", analysis_api.JudgmentsExport.as_view(fmt="jsonl"),
         name="api-study-judgments-jsonl"),
    path(STUDY + "judgments.parquet", analysis_api.JudgmentsExport.as_view(fmt="parquet"),
         name="api-study-judgments-parquet"),
    path(STUDY + "spans.csv", analysis_api.SpansExport.as_view(fmt="csv"),
         name="api-study-spans-csv"),
    path(STUDY + "spans.jsonl", analysis_api.SpansExport.as_view(fmt="jsonl"),
         name="api-study-spans-jsonl"),
    path(STUDY + "spans.parquet", analysis_api.SpansExport.as_view(fmt="parquet"),
         name="api-study-spans-parquet"),
    # The adjudication queue: list it, record an expert's label
    path(STUDY + "adjudication/", analysis_api.AdjudicationQueueView.as_view(),
         name="api-study-adjudication"),
    # Metric runs
    path(STUDY + "metric-runs/", metrics_api.StudyMetricRuns.as_view(),
         name="api-study-metric-runs"),
    path("metric-runs/<int:pk>/", metrics_api.MetricRunDetail.as_view(), name="api-metric-run"),
    path(STUDY + "metric-results/", metrics_api.StudyMetricResults.as_view(),
         name="api-metric-results"),
    # Proxy judges (LLM and learned proxies)
    path(STUDY + "proxy-runs/", proxy_api.StudyProxyRuns.as_view(), name="api-study-proxy-runs"),
    path("proxy-runs/<int:pk>/", proxy_api.ProxyRunDetail.as_view(), name="api-proxy-run"),
    path("proxy-runs/<int:pk>/resume/", proxy_api.ProxyRunResume.as_view(),
         name="api-proxy-run-resume"),
    path("proxy-runs/<int:pk>/threshold/", proxy_api.ProxyRunThreshold.as_view(),
         name="api-proxy-run-threshold"),
    path("proxy-runs/<int:pk>/results/", proxy_api.ProxyRunResults.as_view(),
         name="api-proxy-run-results"),
    path("proxy-runs/<int:pk>/latte-scores/", proxy_api.ProxyRunLatteScores.as_view(),
         name="api-proxy-run-latte-scores"),
    path(STUDY + "learned-proxies/", proxy_api.StudyLearnedProxies.as_view(),
         name="api-study-learned-proxies"),
    path("learned-proxies/<int:pk>/", proxy_api.LearnedProxyDetail.as_view(),
         name="api-learned-proxy"),
    path(STUDY + "judge-versions/", judge_versions_api.StudyJudgeVersions.as_view(),
         name="api-study-judge-versions"),
    path("judge-versions/<int:pk>/", judge_versions_api.JudgeVersionDetail.as_view(),
         name="api-judge-version"),
    # Analyses
    path(STUDY + "analysis-runs/", analysis_api.StudyAnalysisRuns.as_view(),
         name="api-study-analysis-runs"),
    path("analysis-runs/<int:pk>/", analysis_api.AnalysisRunDetail.as_view(),
         name="api-analysis-run"),
    *[
        path(f"analysis-runs/<int:pk>/{name}", analysis_api.AnalysisReport.as_view(fmt=fmt),
             name=f"api-analysis-report-{fmt}")
        for fmt, name in analysis_api.REPORT_FORMATS.items()
    ],
    # Prolific (its REST API, for a linked study)
    path(STUDY + "prolific/", prolific_api.ProlificLinkView.as_view(), name="api-study-prolific"),
    path(STUDY + "prolific/sync/", prolific_api.ProlificSyncView.as_view(),
         name="api-study-prolific-sync"),
    path(STUDY + "prolific/submissions/", prolific_api.ProlificSubmissionList.as_view(),
         name="api-study-prolific-submissions"),
    path(STUDY + "prolific/submissions/<str:submission_id>/approve/",
         prolific_api.ProlificApprove.as_view(), name="api-study-prolific-approve"),
    path(STUDY + "prolific/submissions/<str:submission_id>/reject/",
         prolific_api.ProlificReject.as_view(), name="api-study-prolific-reject"),
    path(STUDY + "prolific/submissions/<str:submission_id>/bonus/",
         prolific_api.ProlificBonus.as_view(), name="api-study-prolific-bonus"),
    path(STUDY + "prolific/submissions/<str:submission_id>/message/",
         prolific_api.ProlificMessage.as_view(), name="api-study-prolific-message"),
    path(STUDY + "prolific/create/", prolific_api.ProlificCreate.as_view(),
         name="api-study-prolific-create"),
    # Rater side
    path("rater/studies/<slug:slug>/slots/", rater_api.MySlots.as_view(), name="api-rater-slots"),
    path("rater/studies/<slug:slug>/next/", rater_api.NextSlot.as_view(), name="api-rater-next"),
    path("rater/slots/<int:slot_id>/judgments/", rater_api.SubmitJudgments.as_view(),
         name="api-rater-submit"),
]
