"""URLs for `bench/raters.py`: the product's URLs plus two reference endpoints.

`/bench/insert/` does exactly one `INSERT` through the Django connection and answers 200: what
any request to this app costs at least (WSGI, middleware, a database connection, one write).

`/bench/floor/` does what any request that takes a rater's answer with the loop's guarantees
costs at least, and nothing of the loop itself: it checks the CSRF token, reads the session,
and in one transaction locks a row (one per session, as each rater's seat is their own),
inserts two rows and updates one (the loop's five statements), then answers a line of HTML.
The bench creates both tables itself.
"""

import zlib

from django.db import connection, transaction
from django.http import HttpRequest, HttpResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from bench.common import FLOOR_ROWS
from config.urls import urlpatterns as product_urlpatterns


@csrf_exempt
@require_POST
def bench_insert(request: HttpRequest) -> HttpResponse:
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO bench_insert (at) VALUES (now())")
    return HttpResponse("ok", content_type="text/plain")


@require_POST
def bench_floor(request: HttpRequest) -> HttpResponse:
    request.session.get("evalstudy_rater_id")
    row = zlib.crc32((request.session.session_key or "").encode()) % FLOOR_ROWS
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SELECT id FROM bench_floor WHERE id = %s FOR UPDATE", [row])
        cursor.execute("INSERT INTO bench_floor_rows (at) VALUES (now()), (now())")
        cursor.execute("UPDATE bench_floor SET at = now() WHERE id = %s", [row])
    return HttpResponse("<main>ok</main>")


urlpatterns = [*product_urlpatterns, path("bench/insert/", bench_insert),
               path("bench/floor/", bench_floor)]
