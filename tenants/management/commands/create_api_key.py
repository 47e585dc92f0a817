"""python manage.py create_api_key --user USERNAME --team SLUG [--scopes read,write]
[--expires 30d|2027-01-01] [--name NAME] [--claude MCP_URL]: prints the new key once, alone on
stdout (or, with --claude, the `claude mcp add` line that uses it)."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from tenants import services
from tenants.apikeys import parse_expiry
from tenants.errors import ServiceError
from tenants.models import Channel, Team
from tenants.principal import Principal


class Command(BaseCommand):
    help = "Create an API key for a team member and print it once (only its hash is kept)."

    def add_arguments(self, parser) -> None:
        parser.add_argument("--user", required=True, help="username of the key's owner")
        parser.add_argument("--team", required=True, help="slug of the team the key acts in")
        parser.add_argument(
            "--scopes", default="read,write", help="comma-separated: read, write, admin"
        )
        parser.add_argument(
            "--expires", default="", help="a duration (30d, 12h) or a date (2027-01-01)"
        )
        parser.add_argument("--name", default="", help="a label to recognise the key by")
        parser.add_argument(
            "--claude",
            metavar="MCP_URL",
            default="",
            help="print a ready-to-paste `claude mcp add` line for this MCP URL (e.g. "
            "http://127.0.0.1:8000/mcp/) instead of the bare key",
        )

    def handle(self, *args, **options) -> None:
        user_model = get_user_model()
        try:
            user = user_model.objects.get(**{user_model.USERNAME_FIELD: options["user"]})
        except user_model.DoesNotExist as exc:
            raise CommandError(f"no user named {options['user']!r}") from exc
        team = Team.objects.filter(slug=options["team"]).first()
        if team is None:
            raise CommandError(f"no team with slug {options['team']!r}")
        # Whoever runs manage.py on the server acts as the platform itself; the audit row
        # says which command did it.
        principal = Principal(
            user=None,
            team=team,
            channel=Channel.SYSTEM,
            extra={"via": "manage.py create_api_key"},
        )
        try:
            key, plaintext = services.create_api_key(
                principal,
                user,
                team,
                options["name"] or "created with manage.py",
                options["scopes"],
                parse_expiry(options["expires"]),
            )
        except ServiceError as exc:
            raise CommandError(exc.message) from exc
        # The key (or the line that uses it) alone on stdout, so scripts can capture it; the
        # description on stderr.
        if options["claude"]:
            self.stdout.write(
                f"claude mcp add --transport http sandhub {options['claude']} "
                f'--header "Authorization: Bearer {plaintext}"'
            )
        else:
            self.stdout.write(plaintext)
        expiry = f"expires {key.expires_at:%Y-%m-%d %H:%M} UTC" if key.expires_at else "no expiry"
        self.stderr.write(
            f"API key shk_{key.prefix} for {user} in team {team.slug}, scopes "
            f"{','.join(key.scopes)}, {expiry}. It is shown only now: store it somewhere safe."
        )
