"""How the proxies' Celery tasks are named: after their app, `proxies.<queue>.<task>`, routed
by that name (config.settings CELERY_TASK_ROUTES: `proxies.llm.*` to `llm`, `proxies.gpu.*` to
`gpu`, `proxies.cpu.*` to `cpu`).

Before the proxies had their own app the same tasks were named `metrics.<queue>.<task>`; each
is registered under that name too (`ALIASES`), the same code with the same options, so a
message queued by an older release (or a beat schedule not yet updated) still runs on the
worker of its queue. The aliases can go once no queue can hold such a message.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from celery import shared_task

APP_PREFIX = "proxies."
LEGACY_PREFIX = "metrics."
#: The name each task was queued under before the proxies had their own app -> its name.
ALIASES: dict[str, str] = {}


def proxy_task(name: str, **options: Any) -> Callable[[Callable[..., Any]], Any]:
    """`shared_task` named `proxies.<name>`, also registered as `metrics.<name>` (ALIASES)."""
    def register(function: Callable[..., Any]) -> Any:
        shared_task(name=LEGACY_PREFIX + name, **options)(function)
        ALIASES[LEGACY_PREFIX + name] = APP_PREFIX + name
        return shared_task(name=APP_PREFIX + name, **options)(function)
    return register
