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
  over the same outputs with ``iterator(chunk_size=<batch>)``.

Rates are outputs per second; ``ratio`` is API / ORM. The two studies are deleted afterwards.

Run: ``.venv/bin/python bench/api.py [--outputs 100000 --batch 5000]`` (PostgreSQL:
DATABASE_URL, default the evalstudy_bench database, created if needed; bench/common.py).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import setup_django  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--outputs", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=5_000)
    args = parser.parse_args(argv)
    setup_django("bench/api.py")

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
        read, next_url = 0, f"{url}?page_size={args.batch}"
        while next_url:
            page = client.get(next_url).json()
            read += len(page["results"])
            next_url = page["next"]
        api_read = time.perf_counter() - start
        assert read == len(rows), read

        start = time.perf_counter()
        orm_read = sum(1 for _ in Output.objects.filter(item__study=study).order_by("id")
                       .values_list("id", "item__external_id", "system__name", "text")
                       .iterator(chunk_size=args.batch))
        orm_read_s = time.perf_counter() - start
        assert orm_read == len(rows), orm_read
        results = [("create", api_create, orm_create), ("read (paginated)", api_read,
                                                         orm_read_s)]
    finally:
        Study.objects.filter(slug__in=["bench-api", "bench-orm"]).delete()
        user.delete()

    n = len(rows)
    print(f"{n:,} outputs, batches/pages of {args.batch:,}")
    print(f"{'operation':<18} {'API s':>8} {'API out/s':>11} {'ORM s':>8} {'ORM out/s':>11} "
          f"{'API/ORM':>8}")
    for name, api_s, orm_s in results:
        print(f"{name:<18} {api_s:8.2f} {n / api_s:11,.0f} {orm_s:8.2f} {n / orm_s:11,.0f} "
              f"{orm_s / api_s:8.2f}")


if __name__ == "__main__":
    main()
