"""Create, list and revoke API tokens for scripts.

    manage.py api_token create alice [--name "nightly pipeline"] [--days 90]
    manage.py api_token list alice
    manage.py api_token revoke alice --prefix es_AbCdEf    (or --all)

The secret is printed once by `create` and stored only as a hash.
"""

import datetime as dt

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.utils import timezone

from evalstudy.audit import COMMAND
from evalstudy.models import ApiToken
from evalstudy.tokens import api_token_create, api_token_revoke


class Command(BaseCommand):
    help = "Create, list or revoke a user's API tokens (Authorization: Token <secret>)."

    def add_arguments(self, parser):
        parser.add_argument("action", choices=["create", "list", "revoke"])
        parser.add_argument("username")
        parser.add_argument("--name", default="", help="what the token is for (create)")
        parser.add_argument("--days", type=int, default=None,
                            help="expire after this many days (create; default: never)")
        parser.add_argument("--prefix", default="", help="revoke the token(s) starting so")
        parser.add_argument("--all", action="store_true", help="revoke every token of the user")

    def handle(self, *args, action, username, name="", days=None, prefix="", all=False,
               **options):
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user {username!r}")
        if action == "create":
            if days is not None and days < 1:
                raise CommandError("--days must be at least 1")
            expires = timezone.now() + dt.timedelta(days=days) if days else None
            _, raw = api_token_create(user=user, name=name, expires_at=expires, source=COMMAND)
            self.stdout.write(raw)
            self.stderr.write("Store this token now: it is not shown again.")
        elif action == "list":
            for token in ApiToken.objects.filter(user=user):
                self.stdout.write(
                    f"{token.prefix}...  {token.name or '-'}  created {token.created_at:%Y-%m-%d}"
                    f"  last used {token.last_used_at or 'never'}"
                    f"  expires {token.expires_at or 'never'}")
        else:
            if not prefix and not all:
                raise CommandError("give --prefix (see `api_token list`) or --all")
            count = api_token_revoke(user=user, prefix=None if all else prefix, source=COMMAND)
            if count == 0:
                raise CommandError(f"no token of {username!r} matches")
            self.stdout.write(f"revoked {count} token(s)")
