"""The Celery application.

Queues are named here and only here: `default` (small bookkeeping), `cpu` (statistics, text
metrics), `gpu` (model-backed scorers; a GPU host runs `celery -A config worker -Q gpu`) and
`llm` (remote LLM calls, I/O bound). Routes map task-name prefixes to queues.
"""

import os

from celery import Celery
from kombu import Queue

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")

QUEUES = ("default", "cpu", "gpu", "llm")

app = Celery("evalstudy")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.conf.task_queues = [Queue(name) for name in QUEUES]
app.conf.task_default_queue = "default"
app.autodiscover_tasks()
