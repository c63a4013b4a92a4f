"""Versioned judge prompts that learn from the raters: corrections on the development split
become few-shot examples, the guard keeps examples out of the evaluation set, the examples
reach the judge server in every request, and each version is evaluated on held-out outputs.

The judge is the fake OpenAI server on loopback (tests/proxies/judges/fake_openai.py). Its
P(yes) follows the judged output's variant; it gets variant 1 wrong (the humans say its
meaning is preserved) unless its prompt holds few-shot examples: a judge that learns."""

from __future__ import annotations

import json
import re

import pytest
from django.core.exceptions import ValidationError
from django.urls import reverse
from django.utils import timezone

from analysis.selectors import proxy_raters
from annotation.models import Judgment
from evalstudy.models import Assignment, AssignmentSlot, AuditEvent, Output, Rater
from proxies.models import JudgePromptVersion, ProxyRun
from proxies.runs import proxy_run_start
from proxies.versions import examples_guard, held_out_outputs, judge_prompt_version_create
from tests.factories import UserFactory, make_study, token_client
from tests.proxies.judges.fake_openai import FakeOpenAI, yes_no_reply
from tests.proxies.test_proxy_runs import backend_for, run_here

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("allow_loopback_judges")]

HUMAN = {"0": "yes", "1": "yes", "2": "no"}  # the raters' answer per variant
ZERO_SHOT = {"0": 0.9, "1": 0.2, "2": 0.1}  # the judge's P(yes) without examples: 1 is wrong
LEARNED = {"0": 0.9, "1": 0.8, "2": 0.1}  # ... and with examples


def judged_variant(prompt: str) -> str:
    """The variant of the output being judged: the last one in the prompt (the examples,
    before it, hold outputs of their own)."""
    return re.findall(r"\(variant (\d)\)", prompt)[-1]


def learning_judge(request):
    shots = request.prompt.count("Transcription:") > 1
    return yes_no_reply(request, (LEARNED if shots else ZERO_SHOT)[judged_variant(request.prompt)])


@pytest.fixture
def learner():
    with FakeOpenAI(learning_judge) as server:
        yield server


def add_humans(study, n_raters: int = 3) -> None:
    """`n_raters` human raters answer `usable` on every output as HUMAN says; the last one
    dissents on variant 0 (the majority stays)."""
    usable = study.criteria.get(key="usable")
    now = timezone.now()
    outputs = list(Output.objects.filter(item__study=study).order_by("pk"))
    for r in range(n_raters):
        rater = Rater.objects.create(kind=Rater.Kind.SLP, external_id=f"slp-{r}", study=study)
        seat = Assignment.objects.create(study=study, rater=rater,
                                         source=Assignment.Source.IMPORTED,
                                         state=Assignment.State.DONE)
        for position, output in enumerate(outputs):
            slot = AssignmentSlot.objects.create(assignment=seat, position=position,
                                                 output=output, completed_at=now,
                                                 kind=AssignmentSlot.Kind.TARGET)
            value = HUMAN[judged_variant(output.text)]
            if r == n_raters - 1 and judged_variant(output.text) == "0":
                value = "no"
            Judgment.objects.create(slot=slot, criterion=usable, rater=rater, value=value,
                                    submitted_at=now)


def versioned_study(learner, *, owner=None, slug="asr", n_examples=3):
    """A study with humans, version 1 run, version 2 built from its corrections and run."""
    study = make_study(n_items=12, n_systems=3, owner=owner, slug=slug)
    add_humans(study)
    v1 = judge_prompt_version_create(study=study, criterion_key="usable", method="latte",
                                     n_examples=0, dev_fraction=0.3, seed=0)
    run1 = run_here(proxy_run_start(study=study, method="latte", backend=backend_for(learner),
                                    prompt_version=v1, enqueue=False))
    v2 = judge_prompt_version_create(study=study, base_version=v1, n_examples=n_examples)
    run2 = run_here(proxy_run_start(study=study, method="latte", backend=backend_for(learner),
                                    prompt_version=v2, enqueue=False))
    return study, (v1, run1), (v2, run2)


def test_corrections_on_the_dev_split_become_examples(learner):
    study, (v1, run1), (v2, run2) = versioned_study(learner)
    assert v1.number == 1 and not v1.examples and v1.parent is None
    dev = set(v1.split["dev_items"])
    assert dev and len(dev) < 12 and v2.split == v1.split
    assert v2.number == 2 and v2.parent == v1 and v2.source_run == run1
    assert len(v2.examples) == 3
    for example in v2.examples:
        output = Output.objects.get(pk=example["output"])
        # A correction: the humans said yes, the zero-shot judge said no; from the dev split.
        assert judged_variant(output.text) == "1" and output.item_id in dev
        assert example["answer"] == "yes" and example["judge"] == "no"
        assert example["text"] == output.text and "3 of 3 raters answered yes" in example["why"]
    assert len({e["item_id"] for e in v2.examples}) == 3  # one per item first
    assert v2.example_outputs == sorted(e["output"] for e in v2.examples)
    assert v2.corrections["disagreements"] == len(dev)  # one wrong variant per dev item
    assert v2.corrections["dev_units"] == 3 * len(dev)
    # Each version answers as its own rater; the run records the version.
    assert run1.rater_id != run2.rater_id and run2.prompt_version == v2
    assert run2.signature["prompt_version"]["number"] == 2
    event = AuditEvent.objects.get(action="create", target_type="judge prompt version",
                                   target_id=str(v2.pk))
    assert event.changes["parent"] == 1 and len(event.changes["examples"]) == 3
    # Version 3 keeps version 2's examples and learns nothing new (v2 agrees on dev): refused.
    with pytest.raises(ValidationError, match="no correction to learn from"):
        judge_prompt_version_create(study=study, base_version=v2, n_examples=2)
    assert JudgePromptVersion.objects.filter(study=study).count() == 2


def test_the_guard_refuses_examples_from_the_evaluation_set(learner):
    study, (v1, _), _ = versioned_study(learner)
    held_out = sorted(held_out_outputs(v1))
    dev_output = Output.objects.filter(item_id__in=v1.split["dev_items"]).first()
    before = JudgePromptVersion.objects.count()
    with pytest.raises(ValidationError) as error:
        judge_prompt_version_create(study=study, base_version=v1,
                                    outputs=[dev_output.pk, held_out[0]])
    message = " ".join(error.value.messages)
    assert f"output {held_out[0]}" in message and "evaluation set" in message
    assert f"output {dev_output.pk} " not in message
    assert JudgePromptVersion.objects.count() == before
    # Whatever produced the examples, the same check: an output of another study, too.
    with pytest.raises(ValidationError, match="evaluation set"):
        examples_guard(study, v1.split, [{"output": held_out[1], "output_b": None}])
    other = make_study(n_items=2, n_systems=2, slug="other")
    stranger = Output.objects.filter(item__study=other).first()
    with pytest.raises(ValidationError, match="is not an output of 'asr'"):
        examples_guard(study, v1.split, [{"output": stranger.pk}])
    # A researcher's own pick from the dev split is accepted, with their note.
    picked = judge_prompt_version_create(study=study, base_version=v1,
                                         outputs=[dev_output.pk],
                                         notes={str(dev_output.pk): "names the place"})
    assert picked.examples[0]["output"] == dev_output.pk
    assert picked.examples[0]["why"] == "names the place"
    assert picked.corrections["picked_by"] == "researcher"


def test_examples_reach_the_judge_and_held_out_outputs_stay_out_of_them(learner):
    _study, (_v1, _), (v2, _) = versioned_study(learner)
    held_out_texts = set(Output.objects.filter(pk__in=held_out_outputs(v2))
                         .values_list("text", flat=True))
    zero_shot = [r for r in learner.requests if r.prompt.count("Transcription:") == 1]
    few_shot = [r for r in learner.requests if r.prompt.count("Transcription:") > 1]
    assert len(zero_shot) == 36 and len(few_shot) == 36  # v1's prompts, then v2's
    for request in few_shot:
        body = json.dumps(request.body)
        prefix, _, _judged = request.prompt.rpartition("Ground truth:")
        assert prefix.count("Transcription:") == 3
        for example in v2.examples:
            assert example["text"] in body
            assert f"Transcription: {{{example['text']}}}. Transcript preserves the meaning of " \
                   f"the ground truth: {{yes}}" in prefix
        # No held-out output is ever shown as an example; each is judged in its own prompt.
        assert not any(text in prefix for text in held_out_texts)
    judged_texts = {re.search(r"Transcription: \{(.*?)\}\.", r.prompt.rpartition(
        "Ground truth:")[2]).group(1) for r in few_shot}
    assert held_out_texts <= judged_texts
    # v2 learned: it now answers variant 1 as the humans do.
    answers = {judged_variant(t): v for t, v in Judgment.objects.filter(
        rater__proxy_runs__prompt_version=v2).values_list("slot__output__text", "value")}
    assert answers == {"0": "yes", "1": "yes", "2": "no"}


def test_held_out_evaluation_excludes_every_example_output(learner):
    study, (v1, run1), (v2, run2) = versioned_study(learner)
    dev_outputs = set(Output.objects.filter(item_id__in=v1.split["dev_items"])
                      .values_list("id", flat=True))
    held_out = held_out_outputs(v2)
    assert held_out.isdisjoint(dev_outputs) and held_out.isdisjoint(v2.example_outputs)
    assert len(held_out) + len(dev_outputs) == 36
    info = proxy_raters(study)
    for run in (run1, run2):
        entry = info[str(run.rater)]
        assert set(entry["exclude_scores"]) == dev_outputs
        assert "development split" in entry["exclude_scores_because"]
    # An ancestor's example from an item later moved out of the split is still excluded.
    v2.split = {**v2.split, "dev_items": []}
    example_items = {e["item_id"] for e in v2.examples}
    assert held_out_outputs(v2).isdisjoint(
        Output.objects.filter(item_id__in=example_items).values_list("id", flat=True))


def test_a_run_of_a_version_is_checked(learner):
    study, (v1, _), _ = versioned_study(learner)
    cases = [({"method": "rubric"}, "is a latte prompt"),
             ({"method": "latte", "criteria": ["severity"]}, "answers its criterion 'usable'"),
             ({"method": "latte", "template": "{reference} {output} ok? "},
              "uses the version's template")]
    for request, expected in cases:
        with pytest.raises(ValidationError, match=re.escape(expected)):
            proxy_run_start(study=study, backend=backend_for(learner), prompt_version=v1,
                            enqueue=False, **request)


def test_another_studys_owner_can_neither_build_on_nor_see_the_versions(learner):
    owner = UserFactory(username="owner", is_staff=True)
    stranger = UserFactory(username="stranger", is_staff=True)
    study, (v1, run1), (v2, _) = versioned_study(learner, owner=owner)
    theirs = make_study(n_items=4, n_systems=2, owner=stranger, slug="theirs")
    # Services: a version or a run of another study is refused.
    with pytest.raises(ValidationError, match="not a prompt version of this study"):
        judge_prompt_version_create(study=theirs, base_version=v2)
    with pytest.raises(ValidationError, match="not a prompt version of this study"):
        proxy_run_start(study=theirs, method="latte", backend=backend_for(learner),
                        prompt_version=v1, enqueue=False)
    with pytest.raises(ValidationError, match="is not a latte run of 'theirs'"):
        judge_prompt_version_create(study=theirs, criterion_key="usable", method="latte",
                                    run=run1)
    # API: the study is not theirs to see; naming its version from their own study fails.
    api = token_client(stranger)
    assert api.get(reverse("api-study-judge-versions", args=["asr"])).status_code == 404
    assert api.get(reverse("api-judge-version", args=[v2.pk])).status_code == 404
    response = api.post(reverse("api-study-judge-versions", args=["asr"]),
                        data=json.dumps({"base_version": v2.pk}),
                        content_type="application/json")
    assert response.status_code == 404
    response = api.post(reverse("api-study-judge-versions", args=["theirs"]),
                        data=json.dumps({"base_version": v2.pk}),
                        content_type="application/json")
    assert response.status_code == 400 and "no prompt version" in response.content.decode()
    assert api.get(reverse("api-study-judge-versions", args=["theirs"])).json() == []
    assert JudgePromptVersion.objects.filter(study=theirs).count() == 0
    # Admin: their list does not show the versions, and the action cannot reach them.
    api_admin = _admin_client(stranger)
    page = api_admin.get(reverse("admin:proxies_judgepromptversion_changelist"))
    assert page.status_code == 200 and "latte prompt v2" not in page.content.decode()
    api_admin.post(reverse("admin:proxies_judgepromptversion_changelist"),
                   {"action": "create_next_versions", "_selected_action": [v2.pk]})
    assert JudgePromptVersion.objects.filter(study=study).count() == 2


def _admin_client(user):
    """A signed-in admin client of a researcher holding Django's model permissions on prompt
    versions (no superuser): what limits them to their studies is the admin's scoping."""
    from django.contrib.auth.models import Permission
    from django.test import Client

    user.user_permissions.add(*Permission.objects.filter(
        content_type__app_label="proxies", content_type__model="judgepromptversion"))
    client = Client()
    client.force_login(user)
    return client


def test_api_lists_creates_and_reads_versions(learner):
    owner = UserFactory(username="owner", is_staff=True)
    study = make_study(n_items=12, n_systems=3, owner=owner, slug="asr")
    add_humans(study)
    api = token_client(owner)
    url = reverse("api-study-judge-versions", args=["asr"])
    bad = api.post(url, data=json.dumps({"criterion": "usable", "method": "latte",
                                         "n_examples": 0, "dev_fraction": 1.5}),
                   content_type="application/json")
    assert bad.status_code == 400 and "dev_fraction" in bad.content.decode()
    created = api.post(url, data=json.dumps({"criterion": "usable", "method": "latte",
                                             "n_examples": 0}),
                       content_type="application/json")
    assert created.status_code == 201, created.content
    v1 = created.json()
    assert v1["number"] == 1 and v1["criterion"] == "usable" and v1["examples"] == []
    run = proxy_run_start(study=study, method="latte", backend=backend_for(learner),
                          prompt_version=JudgePromptVersion.objects.get(pk=v1["id"]),
                          enqueue=False)
    premature = api.post(url, data=json.dumps({"base_version": v1["id"]}),
                         content_type="application/json")
    assert premature.status_code == 400 and "no finished run" in premature.content.decode()
    run_here(run)
    created = api.post(url, data=json.dumps({"base_version": v1["id"], "n_examples": 2,
                                             "note": "first corrections"}),
                       content_type="application/json")
    assert created.status_code == 201, created.content
    v2 = created.json()
    assert v2["number"] == 2 and v2["parent"] == 1 and len(v2["examples"]) == 2
    listed = api.get(url).json()
    assert [v["number"] for v in listed] == [1, 2] and listed[0]["runs"] == [run.pk]
    detail = api.get(v2["url"]).json()
    assert set(detail["held_out_outputs"]).isdisjoint(detail["example_outputs"])
    assert AuditEvent.objects.filter(action="create", source="api",
                                     target_type="judge prompt version").count() == 2
    # A run of v2 through the proxy-run endpoint.
    started = api.post(reverse("api-study-proxy-runs", args=["asr"]), data=json.dumps(
        {"method": "latte", "backend": backend_for(learner), "prompt_version": v2["id"]}),
        content_type="application/json")
    assert started.status_code == 202, started.content
    assert ProxyRun.objects.get(pk=started.json()["id"]).prompt_version_id == v2["id"]


def test_viewers_read_versions_but_cannot_create_them(learner):
    from evalstudy.models import StudyCollaborator

    owner = UserFactory(username="owner", is_staff=True)
    viewer = UserFactory(username="viewer", is_staff=True)
    study = make_study(n_items=6, n_systems=2, owner=owner, slug="asr")
    StudyCollaborator.objects.create(study=study, user=viewer, role="viewer")
    judge_prompt_version_create(study=study, criterion_key="usable", method="latte",
                                n_examples=0)
    api = token_client(viewer)
    url = reverse("api-study-judge-versions", args=["asr"])
    assert len(api.get(url).json()) == 1
    response = api.post(url, data=json.dumps({"base_version": 1}),
                        content_type="application/json")
    assert response.status_code == 403


def test_admin_creates_version_one_and_the_next_from_corrections(learner):
    owner = UserFactory(username="owner", is_staff=True)
    study = make_study(n_items=12, n_systems=3, owner=owner, slug="asr")
    add_humans(study)
    client = _admin_client(owner)
    add = client.post(reverse("admin:proxies_judgepromptversion_add"), {
        "study": study.pk, "criterion_key": "usable", "method": "latte", "template": "",
        "dev_fraction": 0.3, "seed": 0, "note": ""})
    assert add.status_code == 302, add.content.decode()[:2000]
    v1 = JudgePromptVersion.objects.get(study=study)
    run_here(proxy_run_start(study=study, method="latte", backend=backend_for(learner),
                             prompt_version=v1, enqueue=False))
    changelist = reverse("admin:proxies_judgepromptversion_changelist")
    client.post(changelist, {"action": "create_next_versions", "_selected_action": [v1.pk]})
    v2 = JudgePromptVersion.objects.get(study=study, number=2)
    assert v2.parent == v1 and len(v2.examples) == 4 and v2.created_by == owner
    page = client.get(changelist).content.decode()
    assert "latte prompt v2" in page or ">2<" in page
    assert AuditEvent.objects.filter(source="admin", target_type="judge prompt version"
                                     ).count() == 2


def test_bad_notes_or_admin_input_are_field_errors_not_server_errors():
    """A `notes` key that is not an output id (the API answered 500), and the admin's add form
    with an unknown criterion, a criterion of the wrong kind for the method, a bad split and a
    second version 1 (each a 500 before): field errors, nothing stored."""
    from django.contrib.auth.models import Permission
    from django.test import Client

    owner = UserFactory(username="owner", is_staff=True)
    owner.user_permissions.add(*Permission.objects.filter(
        content_type__app_label="proxies", content_type__model="judgepromptversion"))
    study = make_study(n_items=12, n_systems=3, owner=owner, slug="asr")
    api = token_client(owner)
    api.raise_request_exception = False
    response = api.post(reverse("api-study-judge-versions", args=["asr"]), data=json.dumps({
        "criterion": "usable", "method": "latte", "n_examples": 0, "notes": {"abc": "x"}}),
        content_type="application/json")
    assert response.status_code == 400, response.content
    assert "notes" in response.content.decode()

    client = Client(raise_request_exception=False)
    client.force_login(owner)
    add = reverse("admin:proxies_judgepromptversion_add")
    good = {"study": study.pk, "criterion_key": "usable", "method": "latte", "template": "",
            "dev_fraction": 0.3, "seed": 0, "note": ""}
    for change, field_text in (({"criterion_key": "nope"}, "is not a criterion"),
                               ({"dev_fraction": 1.5}, "strictly between 0 and 1")):
        response = client.post(add, {**good, **change})
        assert response.status_code == 200, response.status_code
        assert field_text in response.content.decode()
    assert not JudgePromptVersion.objects.exists()
    assert client.post(add, good).status_code == 302
    response = client.post(add, good)
    assert response.status_code == 200
    assert "already has a version 1" in response.content.decode()
    assert JudgePromptVersion.objects.count() == 1
