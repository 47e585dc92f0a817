"""Re-encrypt every credential's secret under the first key of settings.CREDENTIAL_KEYS.

Rotation: put the new key first in SANDHUB_CREDENTIAL_KEYS (keeping the old ones after it),
run this command, then drop the old keys once it reports no failures.
"""

from __future__ import annotations

from typing import Any

from cryptography.fernet import InvalidToken
from django.core.management.base import BaseCommand, CommandError

from hosts.crypto import CredentialKeyError
from hosts.models import Credential


class Command(BaseCommand):
    help = "Re-encrypt every credential with the first (newest) key in CREDENTIAL_KEYS."

    def handle(self, *args: Any, **options: Any) -> None:
        rotated = 0
        failed: list[str] = []
        # One save per credential: a key that cannot decrypt one row must not block the rest.
        for credential in Credential.objects.order_by("pk").iterator():
            try:
                credential.rotate_key()
            # crypto.rotate lets Fernet's InvalidToken through (decrypt wraps it): catch both.
            except (CredentialKeyError, InvalidToken) as exc:
                failed.append(f"{credential.name}: {exc or 'no configured key decrypts it'}")
                continue
            rotated += 1
        self.stdout.write(f"re-encrypted {rotated} credential(s) with the first key")
        if failed:
            raise CommandError(
                "could not re-encrypt (keep the old keys configured until these are fixed):\n  "
                + "\n  ".join(failed)
            )
        self.stdout.write(self.style.SUCCESS("older keys may now be removed"))
