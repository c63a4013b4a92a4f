"""The report's judge prompt versions section: per version, agreement with the human majority
on held-out outputs only, pinned against values worked out by hand, and the validity section
scoring a versioned judge on the same held-out outputs."""

from __future__ import annotations

import pytest
from django.template.loader import render_to_string

from analysis.extras import extras_sections
from analysis.extras import judge_versions as part
from analysis.selectors import judgments_tidy, proxy_raters
from analysis.stats.judge_agreement import agreement_with_majority
from analysis.stats.pipeline import proxy_validity
from evalstudy.models import Output
from proxies.versions import held_out_outputs
from tests.proxies.conftest import allow_loopback_judges  # noqa: F401 - a fixture
from tests.proxies.judges.fake_openai import FakeOpenAI
from tests.proxies.test_judge_versions import learning_judge, versioned_study

pytestmark = pytest.mark.django_db


@pytest.fixture
def loop_learner(allow_loopback_judges):  # noqa: F811 - the fake judge listens on loopback
    with FakeOpenAI(learning_judge) as server:
        yield server


def test_kappa_and_accuracy_against_the_majority_by_hand():
    # Judge yes/no/yes vs majorities yes/no/no (unit 4 tied among the humans: left out):
    # accuracy 2/3; kappa = (2/3 - 4/9) / (1 - 4/9) = 0.4.
    figures = agreement_with_majority(
        "binary", {1: "yes", 2: "no", 3: "yes", 4: "no"},
        {1: ["yes"], 2: ["no", "no", "yes"], 3: ["no"], 4: ["yes", "no"]})
    assert figures["n"] == 3 and figures["left_out"]["human_tie"] == 1
    assert figures["accuracy"]["value"] == pytest.approx(2 / 3)
    # Wilson 95% interval for 2/3 (R: prop.test(2, 3, correct = FALSE)$conf.int).
    assert figures["accuracy"]["ci_low"] == pytest.approx(0.2076596, abs=1e-6)
    assert figures["accuracy"]["ci_high"] == pytest.approx(0.9385081, abs=1e-6)
    assert figures["kappa"]["value"] == pytest.approx(0.4)
    # Severity is compared on its binary reading: levels 0 and 1 both preserve the meaning.
    assert agreement_with_majority("severity", {1: "1"}, {1: ["0", "0"]})["matches"] == 1


def test_section_shows_agreement_per_version_on_held_out_outputs(loop_learner):
    study, (v1, run1), (v2, run2) = versioned_study(loop_learner)
    judgments = judgments_tidy(study)
    data = part.compute(study, judgments, {}, {})
    [entry] = data["criteria"]
    held_out = held_out_outputs(v2)
    held_out_items = len(held_out) // 3
    assert entry["n_held_out"] == len(held_out) and entry["method"] == "latte"
    first, second = entry["versions"]
    assert (first["number"], second["number"], second["parent"]) == (1, 2, 1)
    assert second["example_outputs"] == v2.example_outputs
    [r1], [r2] = first["raters"], second["raters"]
    assert r1["runs"] == [run1.pk] and r2["runs"] == [run2.pk]
    # Per held-out item: the zero-shot judge says yes/no/no to variants 0/1/2, the majority
    # yes/yes/no: accuracy 2/3, kappa (2/3 - 4/9) / (5/9) = 0.4. Version 2 agrees everywhere.
    assert r1["n"] == r2["n"] == 3 * held_out_items
    assert r1["accuracy"]["value"] == pytest.approx(2 / 3)
    assert r1["kappa"]["value"] == pytest.approx(0.4)
    assert r2["accuracy"]["value"] == 1.0 and r2["kappa"]["value"] == pytest.approx(1.0)
    # No example output (nor any output of the development split) is in either figure.
    dev_outputs = set(Output.objects.filter(item_id__in=v1.split["dev_items"])
                      .values_list("id", flat=True))
    assert dev_outputs.isdisjoint(held_out) and len(dev_outputs) + len(held_out) == 36
    assert second["n_excluded_outputs"] == len(dev_outputs)

    result = {"extras": {"judge_versions": data}}
    [section] = [s for s in extras_sections(result) if s["title"] == "Judge prompt versions"]
    [block] = section["blocks"]
    assert "held-out outputs" in block["paragraphs"][0]
    assert "no judge is scored on a case it was shown" in block["paragraphs"][0]
    [table] = block["tables"]
    rows = [[cell for cell, _ in row] for row in table["body"]]
    assert [row[0] for row in rows] == ["v1", "v2"]
    assert rows[0][5] == rows[1][5] == 3 * held_out_items
    assert rows[0][6].startswith("67% [") and rows[1][6].startswith("100% [")
    assert rows[0][7].startswith("0.40 [") and rows[1][7].startswith("1.00")
    html = render_to_string("analysis/_report_block.html", {"block": block})
    assert "Agreement with the human majority on held-out outputs" in html and "v2" in html


def test_validity_scores_a_versioned_judge_on_held_out_outputs_only(loop_learner):
    study, (_v1, _), (v2, run2) = versioned_study(loop_learner)
    judgments = judgments_tidy(study)
    options = {"proxy_raters": proxy_raters(study)}
    out = proxy_validity(judgments, {"kind": "binary", "key": "usable"}, None, options, [])
    names = {r: f"rater:{r}" for r in judgments["rater"].unique()}
    entry = next(p for p in out["proxies"] if p["proxy"] == names[str(run2.rater)])
    assert entry["evaluated_on"]["n_outputs"] == len(held_out_outputs(v2))
    assert entry["evaluated_on"]["n_excluded"] == 36 - len(held_out_outputs(v2))


def test_no_versions_no_section(study):
    assert part.compute(study, judgments_tidy(study), {}, {}) is None


def test_an_analysis_run_renders_the_section_in_its_report(loop_learner):
    from analysis.services import analysis_run_execute, analysis_run_start

    study, _, _ = versioned_study(loop_learner)
    run = analysis_run_execute(analysis_run_start(study=study, enqueue=False))
    assert run.status == "done", run.error
    versions = run.result["extras"]["judge_versions"]["criteria"][0]["versions"]
    assert [v["number"] for v in versions] == [1, 2]
    assert "Judge prompt versions" in run.report_html
    assert "Agreement with the human majority on held-out outputs" in run.report_html


def _answer(study, rater, criterion, pair, value):
    from django.utils import timezone

    from annotation.models import Judgment
    from evalstudy.models import Assignment, AssignmentSlot

    now = timezone.now()
    seat, _ = Assignment.objects.get_or_create(
        study=study, rater=rater,
        defaults={"source": Assignment.Source.IMPORTED, "state": Assignment.State.DONE})
    slot = AssignmentSlot.objects.create(
        assignment=seat, position=seat.slots.count(), output_id=pair[0], output_b_id=pair[1],
        completed_at=now, kind=AssignmentSlot.Kind.TARGET)
    Judgment.objects.create(slot=slot, criterion=criterion, rater=rater, value=value,
                            submitted_at=now)


def test_a_pair_shown_either_way_round_is_one_unit_for_humans_and_judge():
    from evalstudy.models import Rater
    from proxies.models import JudgePromptVersion, ProxyRun
    from proxies.versions import human_answers
    from tests.factories import make_study

    study = make_study(n_items=3, n_systems=2, design="pairwise")
    preference = study.criteria.get(key="preference")
    items = list(study.items.order_by("pk"))
    (x, y), (p, q) = (sorted(Output.objects.filter(item=i).values_list("id", flat=True))
                      for i in items[1:])
    humans = [Rater.objects.create(kind=Rater.Kind.SLP, external_id=f"h{k}", study=study)
              for k in range(3)]
    # Pair (x, y): one rater saw it as (x, y) and preferred B; two saw (y, x) and preferred B,
    # i.e. x: the majority, read one way, is A (2 of 3).
    _answer(study, humans[0], preference, (x, y), "B")
    _answer(study, humans[1], preference, (y, x), "B")
    _answer(study, humans[2], preference, (y, x), "B")
    # Pair (p, q): every rater saw it only as (q, p); a tie keeps its meaning.
    _answer(study, humans[0], preference, (q, p), "A")
    _answer(study, humans[1], preference, (q, p), "A")
    _answer(study, humans[2], preference, (q, p), "tie")
    assert human_answers(study, preference) == {(x, y): ["B", "A", "A"],
                                                (p, q): ["B", "B", "tie"]}
    version = JudgePromptVersion.objects.create(
        study=study, criterion=preference, method="drpe", number=1,
        split={"dev_items": [items[0].pk], "seed": 0})
    loop_learner = Rater.objects.create(kind=Rater.Kind.LLM, external_id="drpe-v1", study=study)
    run = ProxyRun.objects.create(study=study, rater=loop_learner, method="drpe",
                                  criteria=["preference"], prompt_version=version)
    _answer(study, loop_learner, preference, (x, y), "A")  # agrees with the 2-of-3 majority
    _answer(study, loop_learner, preference, (p, q), "B")  # shown the other way round: agrees too
    data = part.compute(study, judgments_tidy(study), {}, {})
    [entry] = data["criteria"]
    assert entry["n_units_with_humans"] == 2
    [rater] = entry["versions"][0]["raters"]
    # Read as stored, (x, y) had one human (B: the judge "wrong") and (p, q) none.
    assert rater["runs"] == [run.pk] and rater["n"] == 2 and rater["matches"] == 2


def test_every_version_is_scored_on_the_units_all_versions_answered(loop_learner):
    from annotation.models import Judgment

    study, (_v1, run1), (v2, run2) = versioned_study(loop_learner)
    held_out = sorted(held_out_outputs(v2))
    full = len(held_out)
    # Version 2's run stopped early: it answered 4 held-out outputs fewer.
    Judgment.objects.filter(rater=run2.rater, slot__output_id__in=held_out[:4]).delete()
    data = part.compute(study, judgments_tidy(study), {}, {})
    [entry] = data["criteria"]
    assert entry["n_common_units"] == full - 4
    [r1], [r2] = (v["raters"] for v in entry["versions"])
    assert r1["n"] == r2["n"] == full - 4
    assert (r1["n_answered"], r1["n_not_common"]) == (full, 4)
    assert (r2["n_answered"], r2["n_not_common"]) == (full - 4, 0)
    [block] = part.section(data, {})["blocks"]
    sentence = block["paragraphs"][2]
    assert f"same {full - 4} held-out units" in sentence and "v1 (" in sentence
    assert ": 4." in sentence

    # Version 1's run answered only those 4: nothing in common, so no figure at all.
    Judgment.objects.filter(rater=run1.rater, slot__output_id__in=held_out[4:]).delete()
    data = part.compute(study, judgments_tidy(study), {}, {})
    [entry] = data["criteria"]
    assert entry["n_common_units"] == 0
    assert all(r["n"] == 0 and r["accuracy"] is None
               for v in entry["versions"] for r in v["raters"])
    [block] = part.section(data, {})["blocks"]
    assert block["paragraphs"][2].startswith("Not compared: no held-out unit")
