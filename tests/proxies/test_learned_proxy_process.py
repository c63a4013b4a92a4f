"""A `train_proxy --sync` whose process is killed does not stay "running" until the stale-run
sweep: SIGTERM marks it failed before the process exits, and after a SIGKILL the next status
read on the host (API, admin, `learned_proxies_fail_dead`) sees the process is gone and fails
it at once. Real `manage.py` processes against the test database."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys

import pytest
from django.urls import reverse

from proxies.models import LearnedProxy
from proxies.training import learned_proxies_fail_dead, process_alive, process_identity
from tests import workers
from tests.factories import UserFactory, token_client
from tests.proxies.test_learned_proxy_runs import synthetic_study
from tests.tiny_models import save_tiny_bert
from tests.workers import ROOT, STARTUP_ENVIRONMENT, wait_for


@pytest.fixture(scope="module")
def two_layer_bert_dir(tmp_path_factory):
    return save_tiny_bert(tmp_path_factory.mktemp("tiny-bert-kill"), layers=2)


def start_training(slug: str, model_dir: str, proxy_dir: str, model_dirs_env: dict):
    """`manage.py train_proxy --sync` of a cross-encoder long enough to be killed midway
    (50 epochs of batch 1 on the tiny model)."""
    params = {"model_path": model_dir, "device": "cpu", "epochs": 50, "batch_size": 1,
              "max_length": 32}
    env = {**STARTUP_ENVIRONMENT, "DJANGO_SETTINGS_MODULE": "config.settings.test",
           "DATABASE_URL": workers.test_database_url(), "EVALSTUDY_PROXY_DIR": proxy_dir,
           "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", **model_dirs_env}
    return subprocess.Popen(
        [sys.executable, "manage.py", "train_proxy", "--study", slug, "--criterion", "usable",
         "--kind", "cross_encoder", "--params", json.dumps(params), "--sync"],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def running_row(process) -> LearnedProxy | None:
    return LearnedProxy.objects.filter(status=LearnedProxy.Status.RUNNING,
                                       pid=process.pid).first()


def test_process_identity_and_liveness():
    me = process_identity()
    assert me["pid"] == os.getpid() and me["host"]
    assert process_alive(me["pid"], me["pid_started"])
    assert not process_alive(me["pid"], (me["pid_started"] or 0) + 1)  # a reused pid
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    assert not process_alive(child.pid)


@pytest.mark.django_db(transaction=True)
def test_a_killed_training_is_failed_by_the_next_status_read(
        tmp_path, two_layer_bert_dir, allow_tmp_model_dirs):
    synthetic_study("killed", seed=11, n_references=30)
    owner = UserFactory(username="owner-killed", is_superuser=True, is_staff=True)
    process = start_training("killed", two_layer_bert_dir, str(tmp_path / "proxies"),
                             allow_tmp_model_dirs)
    try:
        assert wait_for(lambda: running_row(process) is not None, timeout=120), (
            process.poll(), process.stdout.read() if process.poll() is not None else "")
        proxy = running_row(process)
        assert proxy.host == process_identity()["host"] and proxy.pid_started
        assert learned_proxies_fail_dead() == 0  # alive: left alone
        process.send_signal(signal.SIGKILL)
        process.wait(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    proxy.refresh_from_db()
    assert proxy.status == LearnedProxy.Status.RUNNING  # nothing could record the kill
    # Reading its status through the API fails it at once, with the reason.
    body = token_client(owner).get(reverse("api-learned-proxy", args=[proxy.pk])).json()
    assert body["status"] == "failed"
    assert body["error"].startswith(f"the process running it (pid {process.pid} on ")
    assert "ended without finishing" in body["error"]


@pytest.mark.django_db(transaction=True)
def test_sigterm_marks_the_training_failed_before_the_process_exits(
        tmp_path, two_layer_bert_dir, allow_tmp_model_dirs):
    synthetic_study("terminated", seed=12, n_references=30)
    process = start_training("terminated", two_layer_bert_dir, str(tmp_path / "proxies"),
                             allow_tmp_model_dirs)
    try:
        assert wait_for(lambda: running_row(process) is not None, timeout=120), (
            process.poll(), process.stdout.read() if process.poll() is not None else "")
        proxy = running_row(process)
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert process.returncode == 128 + signal.SIGTERM, output
    assert "stopped by SIGTERM, marked failed" in output
    proxy.refresh_from_db()
    assert proxy.status == LearnedProxy.Status.FAILED and proxy.finished_at is not None
    assert proxy.error.startswith(f"stopped by SIGTERM (the process running it, pid "
                                  f"{process.pid}, was asked to end)")
