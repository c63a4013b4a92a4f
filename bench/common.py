"""What the PostgreSQL benches share: the bench database, created on demand, and Django set up
against it."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from urllib.parse import unquote, urlsplit

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DATABASE_URL = "postgres://postgres@127.0.0.1:5432/evalstudy_bench"
# Rows of the raters bench's floor table: each session locks its own, as each rater's seat is
# their own (`bench/bench_urls.py`).
FLOOR_ROWS = 1024


def ensure_database(url: str) -> None:
    """Create the PostgreSQL database named in `url` when it does not exist."""
    import psycopg2
    from psycopg2 import sql

    parts = urlsplit(url)
    name = unquote(parts.path.lstrip("/"))
    params = {
        "host": parts.hostname or None,
        "port": parts.port or None,
        "user": unquote(parts.username) if parts.username else None,
        "password": unquote(parts.password) if parts.password else None,
    }
    conn = psycopg2.connect(dbname="postgres", **{k: v for k, v in params.items() if v})
    try:
        conn.autocommit = True
        with conn.cursor() as cursor:
            cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name])
            if cursor.fetchone() is None:
                cursor.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
                print(f"created database {name}")
    finally:
        conn.close()


def setup_django(script: str, *, settings: str | None = None) -> str:
    """Point Django at the bench database (DATABASE_URL, else evalstudy_bench), create it if
    needed, set Django up and migrate; returns the database URL. `settings` forces a settings
    module (the server and the bench process must see the same one)."""
    url = os.environ.setdefault("DATABASE_URL", DEFAULT_DATABASE_URL)
    if urlsplit(url).scheme not in ("postgres", "postgresql", "pgsql", "psql"):
        sys.exit(f"{script} needs PostgreSQL; DATABASE_URL is {url}")
    if settings:
        os.environ["DJANGO_SETTINGS_MODULE"] = settings
    else:
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings.test")
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    ensure_database(url)

    import django
    from django.core.management import call_command

    django.setup()
    call_command("migrate", verbosity=0)
    return url
