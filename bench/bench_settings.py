"""Settings for `bench/raters.py`: the test settings plus the bench's own URLs.

The bench's reference endpoint (`/bench/insert/`) lives in `bench.bench_urls`, never in the
product's URLs. Sessions stay database-backed as in the base settings, so the rater pages cost
what they cost in production. DATABASE_URL defaults to the bench database, not the test one.
"""

import os

os.environ.setdefault("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/evalstudy_bench")

from config.settings.test import *  # noqa: E402,F403

ROOT_URLCONF = "bench.bench_urls"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
# The bench study gives every simulated rater (hundreds) a seat on the same two lists.
EVALSTUDY_MAX_RATINGS_PER_OUTPUT = 1000
