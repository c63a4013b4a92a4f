"""Benchmark: bulk-create outputs through the REST API and read them back paginated, against
the ORM doing the same in the same run.

What is measured
----------------
A draft study with ``--outputs / 2`` items and 2 systems (items created with the ORM, untimed).

* ``API create``: ``POST /api/v1/studies/<slug>/outputs/`` with JSON bodies of ``--batch``
  (5,000) ``{"item", "system", "text"}`` rows each, through the whole Django stack (Django's
  test client: URL routing, token authentication, permission checks, JSON parsing, validation,
  one transaction per request), until ``--outputs`` (100,000) outputs exist.
* ``ORM create``: ``Output.objects.bulk_create`` of the same rows in batches of ``--batch`` on
  a second study with the same items (what the importer itself does, without HTTP or checks).
* ``API read``: ``GET .../outputs/?page_size=<batch>`` following ``next`` until the end.
* ``ORM read``: iterating ``values_list("id", "item__external_id", "system__name", "text")``
  over the same outputs with ``iterator(chunk_size=<batch>)`` and rendering each page of
  ``<batch>`` rows as the API does: the same ``{"count", "next", "previous", "results"}`` body
  of ``{"id", "item", "system", "text"}`` dicts, through ``json.dumps`` with DRF's settings
  (compact, not ASCII-escaped) to UTF-8 bytes. Without the rendering the reference would
  leave out work the API cannot skip, and the read ratio would not compare like with like.
  (The API side also decodes each page with ``.json()`` to follow ``next``: a few percent.)

Rates are outputs per second. ``API/ORM rate`` is the API's rate over the ORM's (below 1: the
API is slower); ``API/ORM time`` is its inverse. No goal is set for these ratios; the machine's
load average is printed before and after, since a loaded machine makes them noisy. The two
studies are deleted afterwards.

Run: ``.venv/bin/python bench/api.py [--outputs 100000 --batch 5000] [--smoke]`` (PostgreSQL:
DATABASE_URL, default the evalstudy_bench database, created if needed; bench/common.py).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from itertools import islice
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import setup_django  # noqa: E402


def load_average() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f} (1, 5, 15 min; {os.cpu_count()} CPUs)"


def render_page(count: int, rows: list[tuple]) -> bytes:
    """One page of outputs as the API's response body: DRF's paginated shape, rendered the way
    DRF's JSONRenderer does by default (compact separators, UTF-8 without escaping)."""
    body = {
        "count": count, "next": None, "previous": None,
        "results": [{"id": pk, "item": item, "system": system, "text": text}
                    for pk, item, system, text in rows],
    }
    return json.dumps(body, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def orm_read(queryset, page_size: int) -> tuple[int, int]:
    """Read `queryset`'s outputs in pages of `page_size` and render each page as JSON; returns
    the number of outputs and of bytes rendered."""
    count = queryset.count()  # the paginator's count, which the API also runs
    rows = queryset.values_list("id", "item__external_id", "system__name", "text").iterator(
        chunk_size=page_size)
    read = rendered = 0
    while page := list(islice(rows, page_size)):
        rendered += len(render_page(count, page))
        read += len(page)
    return read, rendered


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--outputs", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=5_000)
    parser.add_argument("--smoke", action="store_true",
                        help="40 outputs in batches of 10, no figures to keep (for make test)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.outputs, args.batch = 40, 10
    setup_django("bench/api.py")
    load_before = load_average()

    from django.test import Client
    from django.test.utils import setup_test_environment

    from evalstudy.models import Item, Output, Study, System
    from evalstudy.tokens import api_token_create
    from tests.factories import UserFactory

    setup_test_environment()  # the test client's host name
    n_items = args.outputs // 2
    user = UserFactory(username="bench-api", is_staff=True)
    Study.objects.filter(slug__in=["bench-api", "bench-orm"]).delete()
    studies = {}
    for slug in ("bench-api", "bench-orm"):
        study = Study.objects.create(slug=slug, title=slug, owner=user)
        systems = [System.objects.create(study=study, name=f"sys-{k}") for k in range(2)]
        Item.objects.bulk_create(
            [Item(study=study, external_id=f"item-{i:06d}", reference=f"reference {i}")
             for i in range(n_items)], batch_size=5000)
        studies[slug] = (study, systems)
    rows = [{"item": f"item-{i:06d}", "system": f"sys-{k}", "text": f"output {i} of {k}"}
            for i in range(n_items) for k in range(2)]
    _, raw = api_token_create(user=user)
    client = Client(HTTP_AUTHORIZATION=f"Token {raw}")
    results = []
    api_bytes = orm_bytes = 0
    try:
        url = "/api/v1/studies/bench-api/outputs/"
        start = time.perf_counter()
        for first in range(0, len(rows), args.batch):
            response = client.post(url, data=json.dumps(rows[first:first + args.batch]),
                                   content_type="application/json")
            assert response.status_code == 201, response.content[:500]
        api_create = time.perf_counter() - start

        study, systems = studies["bench-orm"]
        ids = dict(study.items.values_list("external_id", "id"))
        system_ids = {s.name: s.pk for s in systems}
        start = time.perf_counter()
        for first in range(0, len(rows), args.batch):
            Output.objects.bulk_create([
                Output(item_id=ids[row["item"]], system_id=system_ids[row["system"]],
                       text=row["text"]) for row in rows[first:first + args.batch]])
        orm_create = time.perf_counter() - start

        start = time.perf_counter()
        read, api_bytes, next_url = 0, 0, f"{url}?page_size={args.batch}"
        while next_url:
            response = client.get(next_url)
            api_bytes += len(response.content)
            page = response.json()
            read += len(page["results"])
            next_url = page["next"]
        api_read = time.perf_counter() - start
        assert read == len(rows), read

        start = time.perf_counter()
        orm_read_n, orm_bytes = orm_read(Output.objects.filter(item__study=study).order_by("id"),
                                 args.batch)
        orm_read_s = time.perf_counter() - start
        assert orm_read_n == len(rows), orm_read_n
        results = [("create", api_create, orm_create), ("read (paginated)", api_read,
                                                         orm_read_s)]
    finally:
        Study.objects.filter(slug__in=["bench-api", "bench-orm"]).delete()
        user.delete()

    n = len(rows)
    print(f"{n:,} outputs, batches/pages of {args.batch:,}")
    print(f"load: {load_before} before")
    print(f"{'operation':<18} {'API s':>8} {'API out/s':>11} {'ORM s':>8} {'ORM out/s':>11} "
          f"{'API/ORM rate':>13} {'API/ORM time':>13}")
    for name, api_s, orm_s in results:
        print(f"{name:<18} {api_s:8.2f} {n / api_s:11,.0f} {orm_s:8.2f} {n / orm_s:11,.0f} "
              f"{orm_s / api_s:13.2f} {api_s / orm_s:13.2f}")
    # Equal but for the pages' next/previous links: the reference renders what the API does.
    print(f"read bodies: API {api_bytes:,} bytes, ORM reference {orm_bytes:,} bytes")
    print(f"load: {load_average()} after")
    if args.smoke:
        print("smoke: tiny sizes, no goal")


if __name__ == "__main__":
    main()
