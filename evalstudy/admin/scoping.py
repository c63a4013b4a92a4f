"""What keeps a researcher to their own studies in the admin: querysets limited to the studies
they may see, foreign keys offering only rows of studies they may change, and admin actions
acting only on rows whose study they hold the role on (evalstudy.permissions). Other apps'
ModelAdmins build on `StudyScopedAdmin` and `rows_with_role`."""

from __future__ import annotations

import functools
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db import models
from django.http import HttpRequest

from kit.admin import AuditedAdmin

from .. import permissions as perms
from ..models import AuditEvent, Rater, Study
from ..permissions import studies_visible_to

# Filter choices drawn from the rows the user may see: a plain related filter would list every
# study's (and system's) name to every researcher.
ONLY_VISIBLE = admin.RelatedOnlyFieldListFilter
ADMIN = AuditEvent.Source.ADMIN


# --- rows of other studies -------------------------------------------------------------------
@functools.cache
def study_path_of(model) -> str | None:
    """The lookup from a row of `model` to its Study ("" for Study itself; e.g. "item__study"
    for Output), or None when the model does not belong to a study (users, raters, configs).
    Follows the first foreign key that leads to a study, so it covers the other apps' models."""
    return _study_path(model, frozenset())


def _study_path(model, seen: frozenset) -> str | None:
    if model is Study:
        return ""
    # One-to-one keys too: a study's plan (StudyPlan.study) belongs to its study, and read
    # only through its criterion it would be a row of no study when that is blank.
    fields = [f for f in model._meta.fields
              if (f.many_to_one or f.one_to_one) and f.related_model not in seen | {model}]
    # A direct key to Study first (a Criterion's study, not its show_if_criterion's).
    for field in sorted(fields, key=lambda f: f.related_model is not Study):
        path = _study_path(field.related_model, seen | {model})
        if path is not None:
            return f"{field.name}__{path}" if path else field.name
    return None


def study_of_row(row: models.Model) -> Study | None:
    """The study `row` belongs to (None for rows that belong to none)."""
    path = study_path_of(type(row))
    if path is None:
        return None
    found: Any = row
    for part in filter(None, path.split("__")):
        found = getattr(found, part, None)
    return found


def rows_usable_by(model, user, minimum: str) -> models.QuerySet | None:
    """Rows of `model` that `user` may point a new or changed row at: those of studies on which
    they hold `minimum` (raters: of those studies). None when `model` is not study-owned or the
    user is a superuser (no limit)."""
    if user.is_superuser:
        return None
    studies = perms.studies_with_role(user, minimum).values("pk")
    if model is Rater:
        return perms.raters_in(studies)
    path = study_path_of(model)
    if path is None:
        return None
    return model._default_manager.filter(**{f"{path or 'pk'}__in": studies})


class StudyRowForm(forms.ModelForm):
    """The admin's form for study-owned rows: refuses a row that points at rows of a study the
    user may not change, or at rows of two different studies (an item of one study with a
    system of another). `study_user` and `study_role` are set per request by
    `StudyRowChoices` (the class it is set on is built afresh for each request)."""

    study_user = None
    study_role = perms.EDITOR

    def clean(self):
        data = super().clean()
        if self.study_user is None:
            return data
        studies = {}
        for name, value in data.items():
            if isinstance(value, Rater) and value.study_id is None:
                continue  # an account holder belongs to no single study
            if isinstance(value, models.Model) and study_path_of(type(value)) is not None:
                studies[name] = study_of_row(value)
        for name, study in studies.items():
            if study is not None and study.pk is not None and not perms.has_role(
                    self.study_user, study, self.study_role):
                self.add_error(name, f"Choose only rows of studies on which you have the "
                                     f"{self.study_role} role (or above).")
        if len({study.pk if study else None for study in studies.values()}) > 1:
            self.add_error(None, "These must all belong to the same study: " + ", ".join(
                f"{name} ({study.slug if study else 'none'})" for name, study in studies.items()))
        return data


class StudyRowChoices:
    """For ModelAdmins and inlines: every foreign key to a study-owned row (or to a rater)
    offers and accepts only rows of the studies on which the user holds `study_role`, whether
    it is a dropdown or a raw-id box, and the form refuses a row that mixes studies; else a
    researcher could read other studies' system names or add rows to studies they cannot see."""

    study_role = perms.EDITOR
    # Typed as the admin's own attribute (any model's form), so that the admins and inlines
    # that mix this in with their own StudyRowForm subclass agree with BaseModelAdmin.form.
    form: type[forms.ModelForm[Any]] = StudyRowForm

    def formfield_for_foreignkey(self, db_field, request, **kwargs):
        formfield = super().formfield_for_foreignkey(db_field, request, **kwargs)
        usable = rows_usable_by(db_field.related_model, request.user, self.study_role)
        if formfield is not None and usable is not None:
            formfield.queryset = formfield.queryset.filter(pk__in=usable.values("pk"))
            formfield.error_messages["invalid_choice"] = (
                f"Choose among the {db_field.related_model._meta.verbose_name_plural} of the "
                f"studies on which you have the {self.study_role} role (or above).")
        return formfield

    def _checked(self, form_class, request):
        if issubclass(form_class, StudyRowForm):
            form_class.study_user = request.user
            form_class.study_role = self.study_role
        return form_class

    def get_form(self, request: HttpRequest, obj: Any = None, change: bool = False,
                 **kwargs: Any) -> type[forms.ModelForm[Any]]:
        # A mixin: the ModelAdmin after it in the MRO has get_form; mypy sees only `object`.
        form_class = super().get_form(request, obj, change=change, **kwargs)  # type: ignore[misc]
        return self._checked(form_class, request)

    def get_formset(self, request, obj=None, **kwargs):
        formset = super().get_formset(request, obj, **kwargs)
        self._checked(formset.form, request)
        return formset


def rows_with_role(request, rows, minimum: str, *, label=str, study_of=study_of_row) -> list:
    """The rows (of an admin action) whose study the user holds `minimum` on. Each row left out
    is reported as a warning naming it and the role needed (rows come from the admin's own
    queryset, so the user can see every one of them)."""
    allowed = []
    for row in rows:
        study = study_of(row)
        if study is not None and perms.has_role(request.user, study, minimum):
            allowed.append(row)
        else:
            where = f"study {study.slug}" if study is not None else "its study"
            # The row's label after a verb: the admin capitalises a message's first letter,
            # which would change a slug ("Newc-trial").
            messages.warning(request, f"Skipped {label(row)}: this needs the {minimum} role "
                                      f"(or above) on {where}.")
    return allowed


class StudyScopedAdmin(StudyRowChoices, AuditedAdmin):
    """Limits rows to the studies the user may see; `study_path` leads from the row to Study."""

    study_path = "study"

    def get_queryset(self, request):
        queryset = super().get_queryset(request)
        if request.user.is_superuser:
            return queryset
        visible = studies_visible_to(request.user).values("pk")
        return queryset.filter(**{f"{self.study_path}__in": visible})

    # Object-level checks (evalstudy.permissions) on top of Django's model permissions: a
    # viewer collaborator sees a study's rows read-only.
    study_role = perms.EDITOR

    def study_of(self, obj) -> Study | None:
        for part in self.study_path.split("__"):
            obj = getattr(obj, part, None)
        return obj

    def has_change_permission(self, request, obj=None):
        allowed = super().has_change_permission(request, obj)
        if obj is None or not allowed:
            return allowed
        return perms.has_role(request.user, self.study_of(obj), self.study_role)

    def has_delete_permission(self, request, obj=None):
        allowed = super().has_delete_permission(request, obj)
        if obj is None or not allowed:
            return allowed
        return perms.has_role(request.user, self.study_of(obj), self.study_role)
