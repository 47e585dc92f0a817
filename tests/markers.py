"""How tests get the markers `make test-fast` leaves out (docker, sshd, browser, qcluster;
declared in pyproject.toml). Not a test module.

A test gets a marker
- from the fixtures it uses, directly or through other fixtures (FIXTURES below, applied to
  every test by tests/conftest.py): whatever brings the engine, an sshd, a browser or a
  cluster says so once, here;
- from its folder, when every test there needs it, or every test that uses some fixture of it
  (`mark_folder` in the folder's conftest.py: tests/docker/, tests/mcp/, tests/api/);
- from its module (`pytestmark`), when the module needs it in a way no fixture shows (the
  real engine behind the services of the live server's world, an sshd of the test's own).
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest

FIXTURES = {
    "docker": {"real_docker", "shared_sandbox", "engine"},  # every `engine` is a Docker client
    "sshd": {"sshd", "server"},
    "browser": {"chromium"},
    "qcluster": {"qcluster"},
}


# What gives a test the database (pytest-django refuses every other test a query): the
# django_db marker, or one of these fixtures, directly or through others.
DATABASE_FIXTURES = {
    "db",
    "transactional_db",
    "django_db_reset_sequences",
    "django_db_serialized_rollback",
    "django_db_setup",
    "live_db",
}


def mark_by_fixtures(items: Iterable[pytest.Item]) -> None:
    for item in items:
        used = set(getattr(item, "fixturenames", ()))
        for marker, fixtures in FIXTURES.items():
            if used & fixtures:
                item.add_marker(marker)
        if not used & DATABASE_FIXTURES and item.get_closest_marker("django_db") is None:
            # Runs the same on every database: CI runs it once (.ci/run).
            item.add_marker("no_database")


def mark_folder(
    items: Iterable[pytest.Item],
    conftest: str,
    marker: str,
    using: set[str] | None = None,
) -> None:
    """`marker` on every test under the folder of `conftest` (its __file__), or, given
    `using`, on those of them that use one of those fixtures."""
    folder = Path(conftest).resolve().parent
    for item in items:
        if folder not in item.path.resolve().parents:
            continue
        if using is None or using & set(getattr(item, "fixturenames", ())):
            item.add_marker(marker)
