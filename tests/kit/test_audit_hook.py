"""The kit's audit hook: the audited admin base knows no app, so the studies app registers the
audit trail's writer from AppConfig.ready (import directions: tests/test_architecture.py)."""

import pytest
from django.core.exceptions import ImproperlyConfigured

from kit import audit


def test_the_audited_admin_refuses_to_run_without_a_recorder(monkeypatch):
    monkeypatch.setattr(audit, "_recorder", None)
    with pytest.raises(ImproperlyConfigured, match="recorder_register"):
        audit.record(actor=None, action=audit.CREATE, target=None, changes={},
                     source=audit.ADMIN)


def test_the_studies_app_registers_the_audit_trail_as_the_recorder():
    from evalstudy.audit import audit_record

    assert audit._recorder is audit_record
