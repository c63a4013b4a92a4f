"""The production settings with one change for the gunicorn test: static files hashed but not
compressed. Brotli-compressing the 39 MB of collected files (admin, API docs bundles) takes
about 45 s, which the image build pays once; the test checks everything else for real."""

from config.settings.production import *  # noqa: F403
from config.settings.production import STORAGES

STORAGES = {
    **STORAGES,
    "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.ManifestStaticFilesStorage"},
}
