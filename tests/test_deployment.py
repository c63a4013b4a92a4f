"""Deployment files: docker-compose.yml, Dockerfile, .env.example and the gunicorn config.

No Docker engine runs here, so the compose file and the image are checked for structure; the
gunicorn config and production settings are run for real: gunicorn on loopback, with static
files collected the way the image build does, answering /healthz, pages and static files.
"""

import re
import secrets
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
import yaml

from config.celery import QUEUES
from tests import workers
from tests.workers import ROOT, STARTUP_ENVIRONMENT

COMPOSE = yaml.safe_load((ROOT / "docker-compose.yml").read_text())
DOCKERFILE = (ROOT / "Dockerfile").read_text()
ENV_EXAMPLE = dict(
    line.split("=", 1) for line in (ROOT / ".env.example").read_text().splitlines()
    if line.strip() and not line.startswith("#")
)


def _command(service: str) -> list[str]:
    return [str(part) for part in COMPOSE["services"][service].get("command", [])]


def _queues(command: list[str]) -> list[str]:
    return command[command.index("-Q") + 1].split(",")


def test_compose_has_every_role():
    assert set(COMPOSE["services"]) == {"postgres", "redis", "migrate", "web", "worker-cpu",
                                        "worker-gpu", "worker-llm", "beat"}


def test_web_runs_gunicorn_with_the_config_and_a_health_check():
    web = COMPOSE["services"]["web"]
    assert _command("web") == ["gunicorn", "-c", "config/gunicorn.conf.py", "config.wsgi"]
    assert "/healthz" in " ".join(web["healthcheck"]["test"])
    assert web["depends_on"]["migrate"]["condition"] == "service_completed_successfully"


def test_one_worker_per_queue_and_every_queue_consumed():
    workers = {name: _queues(_command(name)) for name in COMPOSE["services"]
               if name.startswith("worker-")}
    assert workers == {"worker-cpu": ["default", "cpu"], "worker-gpu": ["gpu"],
                       "worker-llm": ["llm"]}
    consumed = [queue for queues in workers.values() for queue in queues]
    assert sorted(consumed) == sorted(QUEUES)  # each queue once, none forgotten
    for name in workers:
        command = _command(name)
        assert command[:4] == ["celery", "-A", "config", "worker"]
        assert "--hostname" in command  # tells the workers apart in /healthz


def test_exactly_one_beat():
    beats = [name for name in COMPOSE["services"] if "beat" in _command(name)]
    assert beats == ["beat"]
    assert _command("beat")[:4] == ["celery", "-A", "config", "beat"]


def test_app_services_share_the_image_and_the_env_file():
    for name in ("migrate", "web", "worker-cpu", "worker-gpu", "worker-llm", "beat"):
        service = COMPOSE["services"][name]
        assert service["image"] == "evalstudy:latest" and service["env_file"] == ".env", name
    # Workers that train learned proxies and those that score them share the artefacts.
    for name in ("worker-cpu", "worker-gpu"):
        assert "proxies:/app/var/proxies" in COMPOSE["services"][name]["volumes"]
    assert ENV_EXAMPLE["EVALSTUDY_PROXY_DIR"] == "/app/var/proxies"


def test_env_example_names_every_required_variable():
    for name in ("SECRET_KEY", "ALLOWED_HOSTS", "DATABASE_URL", "CELERY_BROKER_URL",
                 "CACHE_URL", "DJANGO_SETTINGS_MODULE", "POSTGRES_PASSWORD"):
        assert name in ENV_EXAMPLE, name
    assert ENV_EXAMPLE["DEBUG"] == "false" and ENV_EXAMPLE["SECRET_KEY"] == ""
    assert ENV_EXAMPLE["DATABASE_URL"].startswith("postgres://")
    assert ENV_EXAMPLE["CELERY_BROKER_URL"].startswith("redis://")
    # Every variable the compose file interpolates has an example value.
    interpolated = set(re.findall(r"\$\{(\w+)", (ROOT / "docker-compose.yml").read_text()))
    assert interpolated <= set(ENV_EXAMPLE), interpolated - set(ENV_EXAMPLE)


def test_dockerfile_pins_torch_like_requirements_and_collects_static():
    pinned = re.search(r"^torch==(\S+)$", (ROOT / "requirements.txt").read_text(), re.M)
    assert f"ARG TORCH_REQUIREMENT=torch=={pinned.group(1)}" in DOCKERFILE
    assert "collectstatic --noinput" in DOCKERFILE
    assert "DJANGO_SETTINGS_MODULE=config.settings.production" in DOCKERFILE
    assert re.search(r"^USER (?!root)\w+", DOCKERFILE, re.M), "the app must not run as root"
    assert 'CMD ["gunicorn", "-c", "config/gunicorn.conf.py", "config.wsgi"]' in DOCKERFILE


def test_gunicorn_config_reads_the_environment():
    env = {**STARTUP_ENVIRONMENT, "WEB_CONCURRENCY": "3", "GUNICORN_TIMEOUT": "45"}
    result = subprocess.run(
        [str(ROOT / ".venv/bin/gunicorn"), "--print-config", "-c", "config/gunicorn.conf.py",
         "config.wsgi"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    config = dict(re.findall(r"^(\w+)\s+= (.*)$", result.stdout, re.M))
    assert config["workers"] == "3" and config["timeout"] == "45"
    assert config["accesslog"] == "-"
    assert "%(q)s" not in config["access_log_format"]  # no query strings (Prolific ids)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _get(url, headers=None):
    request = urllib.request.Request(url, headers=headers or {})

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args, **kwargs):
            return None

    opener = urllib.request.build_opener(NoRedirect)
    try:
        with opener.open(request, timeout=10) as response:
            return response.status, dict(response.headers), response.read()
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), error.read()


@pytest.mark.slow
@pytest.mark.django_db
def test_gunicorn_serves_the_production_settings(tmp_path):
    port = _free_port()
    env = {k: v for k, v in STARTUP_ENVIRONMENT.items() if k not in ("DEBUG", "CACHE_URL")}
    env.update({
        "DJANGO_SETTINGS_MODULE": "tests.production_fast_static",
        "SECRET_KEY": secrets.token_urlsafe(50), "ALLOWED_HOSTS": "127.0.0.1",
        "DATABASE_URL": workers.test_database_url(), "CELERY_BROKER_URL": STARTUP_ENVIRONMENT.get(
            "CELERY_BROKER_URL", "redis://127.0.0.1:6379/15"),
        "USE_X_FORWARDED_PROTO": "true", "EVALSTUDY_VAR_DIR": str(tmp_path),
        "WEB_CONCURRENCY": "1", "GUNICORN_BIND": f"127.0.0.1:{port}",
    })
    collected = subprocess.run([sys.executable, "manage.py", "collectstatic", "--noinput",
                                "-v", "0"], cwd=ROOT, env=env, capture_output=True, text=True,
                               timeout=300)
    assert collected.returncode == 0, collected.stderr
    server = subprocess.Popen(
        [str(ROOT / ".venv/bin/gunicorn"), "-c", "config/gunicorn.conf.py", "config.wsgi"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                status, _, body = _get(f"{base}/healthz")
                break
            except OSError:
                assert time.monotonic() < deadline and server.poll() is None, "no server"
                time.sleep(0.3)
        assert status == 200, body  # plain HTTP is allowed for probes
        # Plain HTTP elsewhere is redirected to HTTPS.
        status, headers, _ = _get(f"{base}/accounts/login/")
        assert status == 301 and headers["Location"].startswith("https://")
        # Through the TLS proxy: secure headers, and hashed static names from the manifest.
        status, headers, body = _get(f"{base}/accounts/login/",
                                     {"X-Forwarded-Proto": "https"})
        assert status == 200
        assert headers["Strict-Transport-Security"].startswith("max-age=31536000")
        assert "script-src 'self'" in headers["Content-Security-Policy"]
        css = re.search(rb'href="(/static/css/app\.[0-9a-f]{12}\.css)"', body)
        assert css, body[:600]
        status, headers, _ = _get(base + css.group(1).decode(), {"X-Forwarded-Proto": "https"})
        assert status == 200 and "immutable" in headers.get("Cache-Control", "")
    finally:
        server.terminate()
        output, _ = server.communicate(timeout=30)
        print(output[-3000:])
    assert '"GET /healthz" 200' in output  # the access log, in the configured format
