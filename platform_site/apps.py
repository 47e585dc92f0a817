"""The site's own app: at every start, the platform's files become its owner's alone."""

from __future__ import annotations

from pathlib import Path

from django.apps import AppConfig
from django.conf import settings

from platform_site.private_files import SQLITE_COMPANIONS, correct_modes


class PlatformSiteConfig(AppConfig):
    name = "platform_site"
    verbose_name = "Sandhub site"

    def ready(self) -> None:
        correct_modes(*private_paths())


def private_paths() -> tuple[list[Path], list[Path], list[tuple[Path, str]]]:
    """Directories, files and (directory, pattern) globs that no other user may read."""
    var_dir = Path(settings.VAR_DIR)
    disk_dir = Path(settings.SANDHUB_DISK_DIR)
    files = [var_dir / "secret_key", var_dir / "credential_key"]
    database = settings.DATABASES["default"]
    if database["ENGINE"] == settings.SQLITE_ENGINE and str(database["NAME"]) != ":memory:":
        files += [Path(f"{database['NAME']}{suffix}") for suffix in SQLITE_COMPANIONS]
    # The disk images and their metadata (hosts/backends/docker/disk.py), wherever they are.
    return [var_dir, disk_dir], files, [(disk_dir, "*.img"), (disk_dir, "*.json")]
