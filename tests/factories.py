"""factory_boy factories and a builder for complete, valid studies."""

from __future__ import annotations

import factory
from django.contrib.auth import get_user_model

from evalstudy.models import (
    AttentionCheck,
    CalibrationItem,
    Criterion,
    Item,
    Output,
    Rater,
    Study,
    System,
)


class UserFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = get_user_model()
        django_get_or_create = ("username",)

    username = factory.Sequence(lambda n: f"user{n}")
    password = factory.django.Password("pw-for-tests")


class StudyFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Study

    slug = factory.Sequence(lambda n: f"study-{n}")
    title = factory.Sequence(lambda n: f"Study {n}")
    # Seeded like the slug: a failing order can be reproduced from the test's study number.
    seed = factory.Sequence(lambda n: 7919 * (n + 1))


class SystemFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = System

    study = factory.SubFactory(StudyFactory)
    name = factory.Sequence(lambda n: f"system-{n}")


class ItemFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Item

    study = factory.SubFactory(StudyFactory)
    external_id = factory.Sequence(lambda n: f"item-{n:04d}")
    reference = factory.Faker("sentence")


class CriterionFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Criterion

    study = factory.SubFactory(StudyFactory)
    key = factory.Sequence(lambda n: f"criterion-{n}")
    prompt = "Does the output preserve the meaning?"
    kind = "binary"


class RaterFactory(factory.django.DjangoModelFactory):
    class Meta:
        model = Rater

    kind = Rater.Kind.CROWD
    external_id = factory.Sequence(lambda n: f"PID{n:06d}")


def invite(study: Study, *, kind: str = Rater.Kind.CROWD, external_id: str = "",
           display_name: str = "", user=None, accept: bool = True, **fields) -> Rater:
    """A rater admitted to `study` the way researchers invite one (`rater_invite`): a new
    personal-link rater of that study, or with `user` that account holder, who accepts the
    invitation unless `accept` is false."""
    from evalstudy.services import invitation_answer, rater_invite

    rater = rater_invite(study=study, kind=kind, external_id=external_id,
                         display_name=display_name, user=user)
    if user is not None:
        rater = Rater.objects.get(user=user)
        if kind != rater.kind:
            Rater.objects.filter(pk=rater.pk).update(kind=kind)
            rater.refresh_from_db()
        if accept:
            invitation_answer(study=study, rater=rater, accept=True)
    if fields:
        Rater.objects.filter(pk=rater.pk).update(**fields)
        rater.refresh_from_db()
    return rater


def make_study(
    *, n_items: int = 6, n_systems: int = 3, design: str = "latin_square",
    ratings_per_output: int = 1, items_per_rater: int | None = None,
    attention_check_every: int = 0, status: str = Study.Status.DRAFT, **settings,
) -> Study:
    """A complete study that passes validation (every item has every system's output). It
    takes Prolific participants on its crowd URL, without codes unless given."""
    settings.setdefault("crowd_platform", "prolific")
    settings.setdefault("crowd_no_codes", True)
    study = StudyFactory(
        design=design, ratings_per_output=ratings_per_output, items_per_rater=items_per_rater,
        attention_check_every=attention_check_every, **settings,
    )
    systems = [SystemFactory(study=study, name=f"sys-{k}") for k in range(n_systems)]
    items = [ItemFactory(study=study, external_id=f"item-{i:03d}") for i in range(n_items)]
    Output.objects.bulk_create(
        Output(item=item, system=system, text=f"{item.reference} (variant {k})")
        for item in items for k, system in enumerate(systems)
    )
    if design == "pairwise":
        CriterionFactory(study=study, key="preference", kind="pairwise",
                         prompt="Which is better?")
    else:
        severity = CriterionFactory(study=study, key="severity", kind="severity",
                                    prompt="How severe are the errors?", order=0)
        CriterionFactory(study=study, key="usable", kind="binary", order=1)
        CriterionFactory(study=study, key="note", kind="text", order=2,
                         required=False, show_if_criterion=severity, show_if_values=["2"])
    pair = design == "pairwise"
    CalibrationItem.objects.create(
        study=study, key="calib-good", reference="turn on the light", text="turn on the light",
        text_b="turn off the light" if pair else "", feedback="Identical: no errors.",
        expected={"preference": "A"} if pair else {"severity": "0", "usable": "yes"},
    )
    if attention_check_every:
        AttentionCheck.objects.create(
            study=study, key="attn-1", reference="call my sister", text="banana umbrella",
            text_b="call my sister" if pair else "",
            expected={"preference": "B"} if pair else {"severity": "2"},
        )
    if status != Study.Status.DRAFT:
        from evalstudy.services import study_open

        study_open(study=study)
        if status == Study.Status.CLOSED:
            study.status = status
            study.save()
    study.refresh_from_db()
    return study


def token_client(user, *, name: str = "tests"):
    """A test client that authenticates every request with a fresh API token of `user`."""
    from django.test import Client

    from evalstudy.tokens import api_token_create

    _, raw = api_token_create(user=user, name=name)
    return Client(HTTP_AUTHORIZATION=f"Token {raw}")
