"""Fixtures every area uses, and the markers `make test-fast` goes by (tests/markers.py):

- two tenants (team A, team B), users with each role, hosts and images, the in-memory and the
  real Docker backend. Like healthchecks' two-tenant base test case: every access test has
  another team at hand;
- the live server on a database committed for the module (helpers: tests/live.py), for the
  MCP, REST, web, previews, security, client and SSH tests;
- the SSH test host of two login users (tests/ssh/logins.py), for the SSH, platform, previews
  and client tests;
- a real django-q2 cluster (tests/qcluster.py), for the services and SSH tests.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management import call_command

from hosts.backends import reset_backends
from hosts.models import Host, Image
from platform_site.private_files import restrict_umask
from sandboxes import services
from tenants.models import Channel, Membership, Role, Team
from tenants.principal import Principal
from tests.fakes import FakeBackend
from tests.leftovers import remove_sandboxes_under
from tests.live import World, build_world, free_port, on_test_database
from tests.markers import mark_by_fixtures
from tests.qcluster import QCluster
from tests.ssh.logins import ProvisionSshd, set_up_users
from tests.ssh.sshd import STATE_DIR, Sshd, ensure_test_user


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The markers of the fixtures each test uses (tests/markers.py)."""
    mark_by_fixtures(items)


# The platform's processes run with umask 077 (platform_site/private_files.py), and importing
# the ASGI application sets it in whichever process does: the tests run under it from the
# start, so no test's files depend on whether an earlier test imported the application.
restrict_umask()


def _user(username: str, team: Team, role: str):
    user = get_user_model().objects.create_user(username, password="not-used-in-tests")
    Membership.objects.create(user=user, team=team, role=role)
    return user


@pytest.fixture
def team_a(db) -> Team:
    return Team.objects.create(slug="alpha", name="Team Alpha", max_running_sandboxes=3)


@pytest.fixture
def team_b(db) -> Team:
    return Team.objects.create(slug="beta", name="Team Beta")


@pytest.fixture
def alice(team_a):
    """Owner of team A."""
    return _user("alice", team_a, Role.OWNER)


@pytest.fixture
def mallory(team_a):
    """Member of team A."""
    return _user("mallory", team_a, Role.MEMBER)


@pytest.fixture
def victor(team_a):
    """Viewer of team A: may read, never change."""
    return _user("victor", team_a, Role.VIEWER)


@pytest.fixture
def bob(team_b):
    """Member of team B: must never see team A's things."""
    return _user("bob", team_b, Role.MEMBER)


@pytest.fixture
def as_alice(alice, team_a) -> Principal:
    return Principal(user=alice, team=team_a, channel=Channel.WEB, source_address="127.0.0.1")


@pytest.fixture
def as_victor(victor, team_a) -> Principal:
    return Principal(user=victor, team=team_a, channel=Channel.WEB)


@pytest.fixture
def as_bob(bob, team_b) -> Principal:
    return Principal(user=bob, team=team_b, channel=Channel.WEB)


@pytest.fixture
def image(db) -> Image:
    return Image.objects.create(
        name="python", reference=settings.SANDHUB_SANDBOX_IMAGE, is_default=True
    )


@pytest.fixture
def docker_host(db) -> Host:
    return Host.objects.create(name="local", kind="docker", endpoint=settings.SANDHUB_DOCKER_URL)


@pytest.fixture
def fake_backend(settings, docker_host, image):
    """Route the docker kind to the in-memory backend for fast service-layer tests."""
    settings.SANDHUB_BACKENDS = {"docker": "tests.fakes.FakeBackend"}
    reset_backends()
    FakeBackend.sandboxes = {}
    FakeBackend.ports = {}
    FakeBackend.apps = {}
    FakeBackend.fail_provision = None
    FakeBackend.lifecycle_gate, FakeBackend.fail_lifecycle = None, None
    FakeBackend.lifecycle_calls, FakeBackend.lifecycle_held = [], threading.Event()
    yield FakeBackend
    reset_backends()


@pytest.fixture
def real_docker(settings, docker_host, image):
    """The real Docker backend on this machine's engine."""
    settings.SANDHUB_BACKENDS = {"docker": "hosts.backends.docker.DockerBackend"}
    reset_backends()
    yield docker_host
    reset_backends()


@pytest.fixture(autouse=True)
def removals_done():
    """run_once removes its sandbox's container after answering: that work belongs to the
    test that started it, not to the next one (which may reset the fake backend)."""
    yield
    from sandboxes.services import removal

    assert removal.wait_for_removals(), "a sandbox removal was still running after 60 s"


@pytest.fixture(autouse=True)
def fast_password_hashing(settings):
    """Users are made in almost every test; the real hasher costs ~0.2 s each."""
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def audit_views_marker(request, monkeypatch):
    """@pytest.mark.audit_views: views of metadata are audited as for a team whose
    audit_views is on (the tests of what those rows say; tests/test_audit_kinds.py covers
    the default, where they are not written)."""
    if request.node.get_closest_marker("audit_views") is not None:
        from tenants import auditing

        monkeypatch.setattr(auditing, "_wanted", lambda principal, draft: True)


# --- the live server, on a database committed for the whole module ---------------------------


@pytest.fixture(scope="module")
def live_db(django_db_setup, django_db_blocker) -> Iterator[None]:
    """Database access for the whole module, committed (no per-test transaction).

    pytest-django sets up the test database only when some collected test is marked for the
    database; these modules' tests are not (a per-test transaction would hide the data from
    the server thread and the subprocess), so when run alone they set it up themselves. The
    flush at the end runs only on a test database, never on the real one.
    """
    from django.test.utils import setup_databases, teardown_databases

    with django_db_blocker.unblock():
        created = None
        if not on_test_database():
            created = setup_databases(verbosity=0, interactive=False, aliases={"default"})
        if not on_test_database():
            raise RuntimeError("refusing to run against the real database")
        try:
            yield
        finally:
            call_command("flush", interactive=False, verbosity=0)
            if created is not None:
                teardown_databases(created, verbosity=0)


@pytest.fixture(scope="module")
def world(live_db) -> Iterator[World]:
    """The module's committed world (tests/live.py): teams, users, API keys, a Docker host."""
    reset_backends()
    yield build_world()
    reset_backends()


@pytest.fixture(scope="module")
def shared_sandbox(world) -> Iterator[str]:
    """One running sandbox of team A (the image carries pytest), for the whole module."""
    principal = world.principal()
    info = services.create_sandbox(principal, memory_mb=512)
    yield info.id
    services.delete_sandbox(principal, info.id)


@pytest.fixture(scope="module")
def asgi_server(live_db) -> Iterator[str]:
    """platform_site.asgi (Django + MCP) under uvicorn on a free loopback port, with the HTTP
    protocol scripts/web.sh runs (the request-head limit, platform_site/httpserver.py)."""
    import uvicorn

    from platform_site.asgi import application
    from platform_site.httpserver import HeadLimitedHttpToolsProtocol

    port = free_port()
    config = uvicorn.Config(
        application,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        http=HeadLimitedHttpToolsProtocol,
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="live-uvicorn", daemon=True)
    thread.start()
    deadline = time.monotonic() + 15
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the live server did not start")
        time.sleep(0.02)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=15)


# --- the SSH test host of two login users (tests/ssh/logins.py) -----------------------------


@pytest.fixture(scope="module")
def server() -> Iterator[Sshd]:
    """A real sshd on loopback letting in the sudo and the no-sudo login users."""
    ensure_test_user()
    with open(STATE_DIR / "provision-lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        set_up_users()
    sshd = ProvisionSshd().start()
    try:
        yield sshd
    finally:
        sshd.close()


@pytest.fixture
def workdir() -> Iterator[Path]:
    """A directory of this test's own (open: the no-sudo login user makes its base there);
    what a failed test left of its sandboxes goes with it."""
    path = Path(tempfile.mkdtemp(prefix="sandhub-test-", dir="/var/tmp"))
    path.chmod(0o777)
    try:
        yield path
    finally:
        remove_sandboxes_under(path)
        needle = f"SANDHUB_WORKSPACE={path}/".encode()  # no-sudo sandboxes' processes
        for entry in os.scandir("/proc"):
            with contextlib.suppress(OSError):
                if entry.name.isdigit() and needle in Path(entry.path, "environ").read_bytes():
                    os.kill(int(entry.name), 9)
        shutil.rmtree(path, ignore_errors=True)


# --- a real django-q2 cluster (tests/qcluster.py) --------------------------------------------


@pytest.fixture(scope="module")
def qcluster(django_db_setup, tmp_path_factory) -> Iterator[QCluster]:
    """A running cluster on the test database for the module; stopped (cleanly) after it.
    The worker is another process and sees only committed rows: the tests that use it are
    transactional (`transactional_db`, or `pytest.mark.django_db(transaction=True)`)."""
    cluster = QCluster(tmp_path_factory.mktemp("qcluster") / "qcluster.log")
    cluster.start()
    yield cluster
    cluster.stop()
