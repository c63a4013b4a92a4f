"""Development on one machine: `make run`. DEBUG on unless the environment says otherwise."""

import os

os.environ.setdefault("SECRET_KEY", "insecure-local-development-key-not-for-production")
os.environ.setdefault("DEBUG", "true")

from .base import *  # noqa: E402,F403
