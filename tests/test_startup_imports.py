"""Starting Django loads no heavy library: not in `manage.py check`, not when every URL's view
is imported, not in a Celery worker's start, not in the common commands.

torch, transformers and sentence-transformers (model-backed metrics and proxies), scipy.stats
(the statistics), matplotlib (the report's plots) and WeasyPrint (its PDF) load in the functions
or worker modules that compute with them. Before, every command imported torch through
`metrics/admin.py -> metrics.services -> metrics/scorers/encoder.py` and scipy.stats through
`analysis.browser -> analysis.exports -> analysis.stats.spans`, several seconds each, so a spec
error took half a minute to print on a busy machine.

Each scenario runs in a fresh interpreter (`-X importtime`); a heavy module found afterwards
fails the test with the chain of imports that pulled it in.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "transformers", "sentence_transformers", "scipy.stats", "matplotlib",
         "weasyprint")

_SETUP = """
import io, json, os, sys
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.local")
import django
django.setup()
from django.core.management import call_command
"""

SCENARIOS = {
    "manage.py check": """
call_command("check", stdout=io.StringIO())
""",
    # What the web process serves: every URL's view module (admin, pages, API, schema).
    "every URL's view": """
import importlib
from django.urls import URLResolver, get_resolver

def walk(resolver):
    for pattern in resolver.url_patterns:
        if isinstance(pattern, URLResolver):
            walk(pattern)
        else:
            importlib.import_module(pattern.callback.__module__)

walk(get_resolver())
""",
    # What `celery -A config worker` imports before it takes a task: the app and every app's
    # tasks module.
    "a Celery worker's start": """
from config.celery import app
app.loader.import_default_modules()
""",
    "manage.py showmigrations": """
call_command("showmigrations", stdout=io.StringIO())
""",
    "a command that prints a spec error": """
import tempfile
from django.core.management.base import CommandError
with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as spec:
    spec.write("study: {title: x}\\nsystems: [a]\\n")
try:
    call_command("import_study", spec.name, stdout=io.StringIO())
except CommandError as error:
    assert "systems" in str(error), error
else:
    raise AssertionError("the spec error was not raised")
""",
}

_REPORT = f"""
print("HEAVY=" + json.dumps([name for name in {HEAVY!r} if name in sys.modules]))
"""


def import_chain(importtime: str, module: str) -> str:
    """"module <- who imported it <- ..." from `-X importtime` output: the outermost import of
    `module` or of one of its submodules, and each enclosing import up to the top."""
    entries = []
    for line in importtime.splitlines():
        found = re.match(r"import time:\s+\d+ \|\s+(\d+) \|( *)(\S+)", line)
        if found:
            entries.append((len(found.group(2)), found.group(3)))
    family = [i for i, (_, name) in enumerate(entries)
              if name == module or name.startswith(module + ".")]
    if not family:
        return f"{module} (no import line: loaded through importlib?)"
    index = min(family, key=lambda i: entries[i][0])
    depth, chain = entries[index][0], [entries[index][1]]
    for outer_depth, name in entries[index + 1:]:  # an import's line follows its children's
        if outer_depth < depth:
            chain.append(name)
            depth = outer_depth
    return " <- ".join(chain)


def heavy_modules_after(script: str, tmp_path: Path) -> tuple[list[str], str]:
    env = {**os.environ,
           "DJANGO_SETTINGS_MODULE": "config.settings.local",
           # A database and a broker of its own: nothing here may touch the shared ones.
           "DATABASE_URL": f"sqlite:///{tmp_path / 'startup.sqlite3'}",
           "CELERY_BROKER_URL": "memory://"}
    done = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", _SETUP + script + _REPORT],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    lines = [line for line in done.stdout.splitlines() if line.startswith("HEAVY=")]
    if done.returncode != 0 or not lines:
        errors = "\n".join(line for line in done.stderr.splitlines()
                           if not line.startswith("import time:"))
        raise AssertionError(f"the scenario failed (exit {done.returncode}):\n{errors[-3000:]}")
    return json.loads(lines[-1].removeprefix("HEAVY=")), done.stderr


@pytest.mark.parametrize("scenario", list(SCENARIOS))
def test_starting_loads_no_heavy_library(scenario, tmp_path):
    heavy, importtime = heavy_modules_after(SCENARIOS[scenario], tmp_path)
    chains = [import_chain(importtime, module) for module in heavy]
    assert not heavy, f"{scenario} imported " + "; ".join(chains)


def test_the_chain_names_who_imported_a_module():
    importtime = "\n".join([
        "import time: self [us] | cumulative | imported package",
        "import time:        10 |         10 |       scipy.stats._stats_py",
        "import time:        10 |         20 |     analysis.stats.spans",
        "import time:        10 |         30 |   analysis.exports",
        "import time:        10 |         40 | analysis.browser",
        "import time:        10 |         10 | kit.rest",
    ])
    assert import_chain(importtime, "scipy.stats") == (
        "scipy.stats._stats_py <- analysis.stats.spans <- analysis.exports <- analysis.browser")
