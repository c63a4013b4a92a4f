"""The audited admin base: every save and delete made through a page built on it is recorded
through `kit.audit.record` (the trail's writer an app registers)."""

from __future__ import annotations

from django.contrib import admin

from . import audit
from .audit import ADMIN, CREATE, DELETE, UPDATE, form_changes, instance_changes, model_snapshot


class AuditedAdmin(admin.ModelAdmin):
    """Writes an audit event for every save and delete made through this admin page and its
    inlines (the admin view wraps each in a transaction, so a failed save leaves no event)."""

    def save_model(self, request, obj, form, change):
        before = model_snapshot(type(obj).objects.get(pk=obj.pk)) if change and obj.pk else None
        super().save_model(request, obj, form, change)
        changes = instance_changes(before, obj)
        # Many-to-many fields are saved after save_model: take them from the form.
        m2m = {f.name for f in obj._meta.many_to_many}
        changes.update({k: v for k, v in form_changes(form).items() if k in m2m})
        if change and not changes:
            return
        audit.record(actor=request.user, source=ADMIN, target=obj, changes=changes,
                     action=UPDATE if change else CREATE)

    def delete_model(self, request, obj):
        self._audit_delete(request, obj)
        super().delete_model(request, obj)

    def delete_queryset(self, request, queryset):
        for obj in queryset:
            self._audit_delete(request, obj)
        super().delete_queryset(request, queryset)

    def _audit_delete(self, request, obj):
        audit.record(actor=request.user, source=ADMIN, action=DELETE, target=obj,
                     changes=instance_changes(obj, None))

    def save_formset(self, request, form, formset, change):
        deleted = [f.instance for f in formset.deleted_forms if f.instance.pk is not None]
        changed = [
            (f.instance, form_changes(f)) for f in formset.initial_forms
            if f.instance.pk is not None and f.has_changed() and f not in formset.deleted_forms
        ]
        for obj in deleted:
            self._audit_delete(request, obj)
        super().save_formset(request, form, formset, change)
        for obj, changes in changed:
            audit.record(actor=request.user, source=ADMIN, action=UPDATE, target=obj,
                         changes=changes)
        for obj in formset.new_objects:
            audit.record(actor=request.user, source=ADMIN, action=CREATE, target=obj,
                         changes=instance_changes(None, obj))


class LabelledRowsMixin:
    """For tabular inlines: every field of every row named for assistive technology. Django's
    tabular rows show a field's label once, as a column heading, which labels no input (axe:
    "Form elements must have labels", critical); each widget gets the label as its aria-label."""

    def get_formset(self, request, obj=None, **kwargs):
        formset = super().get_formset(request, obj, **kwargs)

        class LabelledRows(formset):
            def add_fields(self, form, index):
                super().add_fields(form, index)
                for name, field in form.fields.items():
                    label = field.label or name.replace("_", " ").capitalize()
                    field.widget.attrs.setdefault("aria-label", str(label))

        LabelledRows.__name__ = formset.__name__
        return LabelledRows
