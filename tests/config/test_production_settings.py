"""Production settings, in a fresh process as a deployment loads them: `check --deploy` is clean,
DEBUG is off unless DEBUG=true, secrets and hosts come only from the environment."""

import secrets
import subprocess
import sys

import pytest

from tests.workers import ROOT, STARTUP_ENVIRONMENT

# Variables a developer's shell may carry that would change what is tested.
CLEARED = ("DEBUG", "SECRET_KEY", "ALLOWED_HOSTS", "DATABASE_URL", "CELERY_BROKER_URL",
           "CACHE_URL", "DJANGO_SETTINGS_MODULE", "USE_X_FORWARDED_PROTO")


def production_env(**overrides) -> dict[str, str]:
    env = {k: v for k, v in STARTUP_ENVIRONMENT.items() if k not in CLEARED}
    env.update({
        "DJANGO_SETTINGS_MODULE": "config.settings.production",
        "SECRET_KEY": secrets.token_urlsafe(50),
        "ALLOWED_HOSTS": "evalstudy.example.org",
        "DATABASE_URL": "postgres://evalstudy@db.internal:5432/evalstudy",
        "CELERY_BROKER_URL": "redis://redis.internal:6379/0",
        "CACHE_URL": "redis://redis.internal:6379/2",
        "USE_X_FORWARDED_PROTO": "true",
    })
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def run(args, **overrides):
    return subprocess.run([sys.executable, *args], cwd=ROOT, env=production_env(**overrides),
                          capture_output=True, text=True, timeout=120)


def setting(name, **overrides):
    result = run(["-c", "import django; django.setup(); from django.conf import settings; "
                        f"print(repr(settings.{name}))"], **overrides)
    return result


def test_check_deploy_is_clean():
    result = run(["manage.py", "check", "--deploy", "--fail-level", "WARNING"])
    assert result.returncode == 0, result.stdout + result.stderr
    assert "System check identified no issues" in result.stdout


def test_check_deploy_flags_state_kept_on_one_host():
    result = run(["manage.py", "check", "--deploy", "--fail-level", "WARNING"], CACHE_URL=None)
    assert result.returncode != 0
    assert "evalstudy.W001" in result.stderr and "CACHE_URL" in result.stderr


def test_debug_is_off_unless_explicitly_on():
    assert setting("DEBUG").stdout.strip() == "False"
    assert setting("DEBUG", DEBUG="false").stdout.strip() == "False"
    assert setting("DEBUG", DEBUG="").stdout.strip() == "False"
    assert setting("DEBUG", DEBUG="true").stdout.strip() == "True"


@pytest.mark.parametrize("missing", ["SECRET_KEY", "ALLOWED_HOSTS", "DATABASE_URL",
                                     "CELERY_BROKER_URL"])
def test_required_variables_fail_loudly(missing):
    result = setting("DEBUG", **{missing: None})
    assert result.returncode != 0
    assert "ImproperlyConfigured" in result.stderr and missing in result.stderr


@pytest.mark.parametrize(("name", "value", "why"), [
    ("SECRET_KEY", "short", "too short"),
    ("SECRET_KEY", "insecure-local-development-key-not-for-production" + "x" * 20, "development"),
    ("CELERY_BROKER_URL", "filesystem://", "one host"),
])
def test_unsafe_values_are_refused(name, value, why):
    result = setting("DEBUG", **{name: value})
    assert result.returncode != 0 and why in result.stderr


def test_security_settings():
    expected = {
        "SESSION_COOKIE_SECURE": "True", "CSRF_COOKIE_SECURE": "True",
        "SECURE_SSL_REDIRECT": "True", "SECURE_HSTS_SECONDS": "31536000",
        "SECURE_PROXY_SSL_HEADER": "('HTTP_X_FORWARDED_PROTO', 'https')",
        "X_FRAME_OPTIONS": "'DENY'", "SECURE_REFERRER_POLICY": "'same-origin'",
    }
    script = "; ".join(f"print(repr(settings.{name}))" for name in expected)
    result = run(["-c", f"import django; django.setup(); from django.conf import settings; "
                        f"{script}"])
    assert result.stdout.split("\n")[:len(expected)] == list(expected.values()), result.stderr
    # Without a trusted proxy Django must not believe a client's X-Forwarded-Proto.
    assert setting("SECURE_PROXY_SSL_HEADER", USE_X_FORWARDED_PROTO=None).stdout.strip() == "None"


def test_static_files_are_served_compressed_with_a_manifest():
    result = setting("STORAGES['staticfiles']['BACKEND']")
    assert "CompressedManifestStaticFilesStorage" in result.stdout

