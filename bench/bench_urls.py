"""URLs for `bench/raters.py`: the product's URLs plus one bare reference endpoint.

`/bench/insert/` does exactly one `INSERT` through the Django connection and answers 200: what
any request to this app costs at least (WSGI, middleware, a database connection, one write).
The bench creates the `bench_insert` table itself.
"""

from django.db import connection
from django.http import HttpRequest, HttpResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST

from config.urls import urlpatterns as product_urlpatterns


@csrf_exempt
@require_POST
def bench_insert(request: HttpRequest) -> HttpResponse:
    with connection.cursor() as cursor:
        cursor.execute("INSERT INTO bench_insert (at) VALUES (now())")
    return HttpResponse("ok", content_type="text/plain")


urlpatterns = [*product_urlpatterns, path("bench/insert/", bench_insert)]
