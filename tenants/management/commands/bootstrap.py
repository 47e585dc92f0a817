"""First-run setup, safe to run again: first admin, default team, local Docker host, image.

Every step looks up before it creates and never changes what exists, so `make run` calls it
on every start: a second run leaves the admin's password and any admin edits alone.
"""

from __future__ import annotations

import os
import secrets
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.password_validation import validate_password
from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.db import transaction

from hosts.models import Host, Image
from tenants import audit, services
from tenants.models import Channel, Membership, Role, Team
from tenants.principal import Principal

PASSWORD_ENV = "SANDHUB_ADMIN_PASSWORD"
DEFAULT_IMAGE_NAME = "python"


def base_url() -> str:
    """Where `make run` serves (scripts/run.sh reads the same two variables)."""
    host = os.environ.get("SANDHUB_BIND_HOST", "127.0.0.1")
    port = os.environ.get("SANDHUB_BIND_PORT", "8000")
    return f"http://{host}:{port}"


class Command(BaseCommand):
    help = (
        "Create the first superuser, a default team owned by it, the local Docker engine as a "
        "host and the default image record. Idempotent: existing records are left unchanged."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--admin-username", default="admin")
        parser.add_argument("--admin-email", default="")
        parser.add_argument(
            "--admin-password",
            default=None,
            help=f"Password for a new admin (else ${PASSWORD_ENV}, else generated and printed "
            "once). Ignored when the admin exists.",
        )
        parser.add_argument("--team-slug", default="default")
        parser.add_argument("--team-name", default="Default team")
        parser.add_argument(
            "--docker-url",
            default=None,
            help="Endpoint of the local Docker engine (default: settings.SANDHUB_DOCKER_URL).",
        )
        parser.add_argument("--host-name", default="local-docker")

    def handle(self, *args: Any, **options: Any) -> None:
        self.created: list[str] = []
        with transaction.atomic():
            user, generated_password = self._admin(options)
            team = self._team(options["team_slug"], options["team_name"], user)
            self._host(options["host_name"], options["docker_url"] or settings.SANDHUB_DOCKER_URL)
            self._image()
            if self.created:
                audit.record(
                    self._principal(team),
                    "platform.bootstrap",
                    details={"created": self.created},
                )
        # Printed only after the commit: a password for a rolled-back user would be useless.
        self._print_login(user, generated_password)

    # --- steps -------------------------------------------------------------------------------

    def _admin(self, options: dict[str, Any]) -> tuple[Any, str | None]:
        """The admin user and, when a password was generated for it, that password."""
        user_model = get_user_model()
        username = options["admin_username"]
        existing = user_model._default_manager.filter(
            **{user_model.USERNAME_FIELD: username}
        ).first()
        if existing is not None:
            kind = "superuser" if existing.is_superuser else "user (not a superuser)"
            self._say(f"{kind} {username!r} exists; password unchanged")
            return existing, None

        given = options["admin_password"] or os.environ.get(PASSWORD_ENV) or None
        password = given or secrets.token_urlsafe(15)
        if given:
            self._check_password(user_model, username, given)
        user = user_model._default_manager.create_superuser(
            **{user_model.USERNAME_FIELD: username},
            email=options["admin_email"],
            password=password,
        )
        self._created(f"superuser {username!r}")
        return user, None if given else password

    def _check_password(self, user_model: Any, username: str, password: str) -> None:
        # The first superuser controls every host: refuse a password the validators reject.
        try:
            validate_password(password, user_model(**{user_model.USERNAME_FIELD: username}))
        except ValidationError as exc:
            raise CommandError("admin password rejected: " + " ".join(exc.messages)) from exc

    def _team(self, slug: str, name: str, owner: Any) -> Team:
        team, created = Team.objects.get_or_create(slug=slug, defaults={"name": name})
        if created:
            self._created(f"team {slug!r}")
        else:
            self._say(f"team {slug!r} exists")
        # An existing membership is left as it is, whatever its role (an admin's choice).
        if not Membership.objects.filter(user=owner, team=team).exists():
            services.add_member(self._principal(team), team, owner, Role.OWNER)
            self._created(f"{owner.get_username()!r} as owner of {slug!r}")
        return team

    def _host(self, name: str, endpoint: str) -> Host:
        # The engine may already be registered under another name an admin chose.
        host = Host.objects.filter(kind=Host.Kind.DOCKER, endpoint=endpoint).order_by("pk").first()
        if host is not None:
            self._say(f"host {host.name!r} ({endpoint}) exists")
            return host
        host, created = Host.objects.get_or_create(
            name=name, defaults={"kind": Host.Kind.DOCKER, "endpoint": endpoint}
        )
        if created:
            self._created(f"docker host {name!r} at {endpoint}")
        else:
            self.stdout.write(
                self.style.WARNING(
                    f"a host named {name!r} exists with endpoint {host.endpoint}; left unchanged "
                    f"(use --host-name to register {endpoint} under another name)"
                )
            )
        return host

    def _image(self) -> Image:
        image = Image.objects.filter(name=DEFAULT_IMAGE_NAME).first()
        if image is not None:
            self._say(f"image {DEFAULT_IMAGE_NAME!r} ({image.reference}) exists")
            return image
        # Only one image may be the default; an admin may already have chosen another.
        first_default = not Image.objects.filter(is_default=True).exists()
        image = Image.objects.create(
            name=DEFAULT_IMAGE_NAME,
            reference=settings.SANDHUB_SANDBOX_IMAGE,
            description="Debian bookworm with Python 3, pip, venv, git and bash",
            is_default=first_default,
        )
        default_note = " (default)" if first_default else ""
        self._created(f"image {DEFAULT_IMAGE_NAME!r} -> {image.reference}{default_note}")
        return image

    def _principal(self, team: Team) -> Principal:
        # The platform itself acts; the audit rows say which command.
        return Principal(
            user=None, team=team, channel=Channel.SYSTEM, extra={"via": "manage.py bootstrap"}
        )

    # --- output ------------------------------------------------------------------------------

    def _created(self, what: str) -> None:
        self.created.append(what)
        self.stdout.write(self.style.SUCCESS(f"created {what}"))

    def _say(self, message: str) -> None:
        self.stdout.write(message)

    def _print_login(self, user: Any, generated_password: str | None) -> None:
        self.stdout.write("")
        # Team users work at the root; Django admin (hosts, credentials, teams) is its own page.
        self.stdout.write(
            f"Log in as {user.get_username()!r}: team pages at {base_url()}/, "
            f"admin at {base_url()}/admin/."
        )
        if generated_password:
            self.stdout.write(
                self.style.WARNING(
                    f"Generated password: {generated_password}\n"
                    "It is shown only this once; change it in admin after logging in."
                )
            )
        else:
            self.stdout.write(
                "Password: the one set when the admin was created "
                f"(--admin-password or ${PASSWORD_ENV}); `manage.py changepassword` resets it."
            )
