"""The REST API fuzzed from its own OpenAPI schema (schemathesis): no input makes it fail.

A live uvicorn serves platform_site.asgi on loopback; schemathesis reads /api/schema/ from it
and sends, for every operation, the schema's examples, its boundary and negative cases
(coverage phase) and a bounded number of generated requests (fuzzing phase), authenticated
with a real key of a team member. The one property checked is "no server error": a 5xx is a
bug whatever the input, and its exact request (as curl) and the server's traceback are in the
failure.

Two passes. real-ids first: the operations on a sandbox, with the ids of a real running
Docker sandbox and of one of its background commands and valid bodies, so requests get past
validation into the services and the engine (that sandbox is never deleted in this pass).
Then as-served: every operation of the schema exactly as served, valid and invalid data, ids
generated (schemathesis also reuses ids it saw in responses, so the real sandbox may go).
Deterministic: a fixed seed, derandomized Hypothesis, no example database, no shrinking (a
failure reports the request that failed, at once).
"""

from __future__ import annotations

import contextlib
import copy
import io
import logging
import tarfile
import traceback
from collections.abc import Iterator
from typing import Any

import pytest
import requests
import schemathesis
from django.core.cache import caches
from django.test import override_settings
from hypothesis import strategies as st

from sandboxes import services
from sandboxes.models import Sandbox, Snapshot
from tests.engine import engine_cleaning_up

pytestmark = pytest.mark.docker

INSTANCE = "security-fuzz"  # containers of this module carry it: cleaned up whatever happens
SEED = 20_260_808
MAX_EXAMPLES = 10  # generated requests per operation and pass, on top of the coverage cases
FEW_EXAMPLES = 4  # for the slowest operations, without coverage cases
REQUEST_TIMEOUT = 120.0  # a run-once creates a container: seconds, not minutes
# The loggers a server-side failure is written to: the request handler's (an exception in a
# view), uvicorn's (one that escaped Django), and Sandhub's own.
SERVER_LOGGERS = ("django.request", "uvicorn.error", "sandhub")
REFUSES_UNKNOWN = "Refuses fields it does not know"
METHODS = ["GET", "PUT", "POST", "DELETE", "OPTIONS", "PATCH", "TRACE", "QUERY"]


def _tar(*members: tuple[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        for name, content in members:
            info = tarfile.TarInfo(name)
            info.size = len(content)
            archive.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


# Sync uploads take a raw tar (application/x-tar), a media type schemathesis cannot make by
# itself: good archives, hostile ones (escaping names, absolute ones) and noise.
schemathesis.openapi.media_type(
    "application/x-tar",
    st.one_of(
        st.sampled_from(
            [
                _tar(("a.txt", b"a"), ("d/b.txt", b"b" * 700)),
                _tar(("../escape.txt", b"x")),
                _tar(("/abs.txt", b"x")),
                _tar(),
                b"",
            ]
        ),
        st.binary(max_size=2048),
    ),
)


class ServerErrors(logging.Handler):
    """Keeps what the live server (a thread of this process) logs at ERROR and above, with
    tracebacks, so a 5xx is reported with its cause and not just its status."""

    def __init__(self) -> None:
        super().__init__(level=logging.ERROR)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        text = f"{record.name}: {record.getMessage()}"
        if record.exc_info:
            text += "\n" + "".join(traceback.format_exception(*record.exc_info))
        self.records.append(text)

    def take(self) -> list[str]:
        taken, self.records = self.records, []
        return taken


@pytest.fixture(scope="module")
def server_errors() -> Iterator[ServerErrors]:
    handler = ServerErrors()
    loggers = [logging.getLogger(name) for name in SERVER_LOGGERS]
    for logger in loggers:
        logger.addHandler(handler)
    yield handler
    for logger in loggers:
        logger.removeHandler(handler)


@pytest.fixture(scope="module")
def target(world) -> Iterator[dict[str, Any]]:
    """A running Docker sandbox of team A with a file (and a link to it) and a background
    command, acted on with a member's key; every sandbox the fuzzing made is deleted
    afterwards. The instance label holds for the whole module (the server thread reads the
    same settings)."""
    caches["ratelimit"].clear()  # ids restart after an earlier module's flush: its counts too
    with override_settings(SANDHUB_INSTANCE=INSTANCE), engine_cleaning_up(INSTANCE):
        # Room for one sandbox besides this one: each creation costs a container.
        world.team_a.max_running_sandboxes = 2
        world.team_a.save(update_fields=["max_running_sandboxes"])
        member = world.principal(world.dave)
        sandbox_id = services.create_sandbox(member, name="fuzzed", memory_mb=256).id
        services.run_command(member, sandbox_id, "mkdir -p d && echo hello > d/hello.txt")
        job = services.start_background(member, sandbox_id, "sleep 600")
        link = services.create_file_link(member, sandbox_id, "d/hello.txt")
        snapshot = services.snapshot_sandbox(member, sandbox_id, "fuzzed")
        try:
            yield {
                "sandbox_id": sandbox_id,
                "command_id": job.id,
                "link_id": link.link_id,
                "snapshot_id": snapshot.id,
                "key": world.keys["dave"],
            }
        finally:
            for sandbox in Sandbox.objects.filter(team=world.team_a).exclude(status="deleted"):
                with contextlib.suppress(Exception):
                    services.delete_sandbox(member, sandbox.public_id)
            for snap in Snapshot.objects.live().filter(team=world.team_a):
                with contextlib.suppress(Exception):
                    services.delete_snapshot(member, snap.public_id)


def fuzz_config(
    key: str,
    *,
    mode: str,
    unexpected_methods: list[str],
    turned_off: tuple[dict[str, Any], ...] = (),
    few: tuple[str, ...] = (),
    **top: Any,
) -> schemathesis.Config:
    """Seeded, derandomized and bounded. `mode`: the kind of data generated; the coverage
    phase also sends each of `unexpected_methods` that an operation does not have (a 405 is
    due); `turned_off`: filters of operations left out; `few`: paths of the slowest operations
    (a few generated requests, no coverage phase); `top`: more top-level keys (base-url,
    parameters). Operations are chosen here, in the config: schemathesis's fixture loader
    replaces a schema's own include/exclude filters with the test's."""
    return schemathesis.Config.from_dict(
        {
            "seed": SEED,
            "headers": {"Authorization": f"Bearer {key}"},
            "request-timeout": REQUEST_TIMEOUT,
            "generation": {
                "mode": mode,
                "max-examples": MAX_EXAMPLES,
                "deterministic": True,
                "no-shrink": True,
                "database": "none",
                "with-security-parameters": False,  # the real key, never a generated one
            },
            "phases": {
                "examples": {"enabled": True},
                "coverage": {"enabled": True, "unexpected-methods": unexpected_methods},
                "fuzzing": {"enabled": True},
                "stateful": {"enabled": False},
            },
            "operations": [
                *(
                    {
                        "include-path": path,
                        "generation": {"max-examples": FEW_EXAMPLES},
                        "phases": {"coverage": {"enabled": False}},
                    }
                    for path in ("/api/schema/", *few)
                ),
                *({**filters, "enabled": False} for filters in turned_off),
            ],
            **top,
        }
    )


def tightened(document: dict[str, Any]) -> dict[str, Any]:
    """The schema with what its request bodies say in words made machine-readable: a body
    that "refuses fields it does not know" gets additionalProperties false. Without it nearly
    every generated body carries a made-up field, is refused with a 400, and the code behind
    validation (the services, the engine) is never reached."""
    document = copy.deepcopy(document)
    for component in document["components"]["schemas"].values():
        if component.get("description", "").startswith(REFUSES_UNKNOWN):
            component.setdefault("additionalProperties", False)
    return document


@pytest.fixture(scope="module", params=["real-ids", "as-served"])
def api_schema(request, asgi_server, target, server_errors):
    """as-served: the live schema exactly as /api/schema/ serves it, every operation, valid
    and invalid data, ids generated. real-ids: the operations on a sandbox, with the real
    sandbox's and background command's ids and valid bodies (tightened), so the requests get
    past validation into the services and the engine; never deleting that sandbox."""
    url = f"{asgi_server}/api/schema/?format=json"
    if request.param == "as-served":
        config = fuzz_config(target["key"], mode="all", unexpected_methods=METHODS)
        return schemathesis.openapi.from_url(url, config=config, timeout=30)
    served = requests.get(url, timeout=30)
    served.raise_for_status()
    config = fuzz_config(
        target["key"],
        mode="positive",
        # Not even as an "unexpected" method on a path that has none: it would be the real one.
        unexpected_methods=[method for method in METHODS if method != "DELETE"],
        turned_off=(
            {"include-path-regex": r"^(?!.*\{(sandbox|snapshot)_id\})"},  # as-served's
            {"include-method": "DELETE", "include-path": "/api/v1/sandboxes/{sandbox_id}/"},
            {"include-method": "DELETE", "include-path": "/api/v1/snapshots/{snapshot_id}/"},
            # A valid deploy waits up to wait_seconds (minutes) for a port: an app that exits
            # 0 (a comment, `true`) is waited for as a daemon, past the request timeout. Its
            # refusals are fuzzed as served; its behaviour is tests/test_previews_*.py's.
            {"include-path": "/api/v1/sandboxes/{sandbox_id}/deploy/"},
        ),
        # Each valid request runs pytest in the container (~0.7 s).
        few=("/api/v1/sandboxes/{sandbox_id}/run-tests/",),
        parameters={
            f"path.{name}": target[name]
            for name in ("sandbox_id", "command_id", "link_id", "snapshot_id")
        },
        **{"base-url": asgi_server},
    )
    return schemathesis.openapi.from_dict(tightened(served.json()), config=config)


@pytest.fixture(scope="module")
def session() -> Iterator[requests.Session]:
    with requests.Session() as http:
        yield http


@pytest.fixture(autouse=True)
def node_id_for_schemathesis(request) -> None:
    """schemathesis's fixture-loaded tests rename the pytest item per operation through
    `item._nodeid`, which pytest 9.2 no longer has (it keeps the id elsewhere): give it back
    as a plain attribute, which pytest itself no longer reads."""
    if not hasattr(request.node, "_nodeid"):
        request.node._nodeid = request.node.nodeid


schema = schemathesis.pytest.from_fixture("api_schema")


@schema.parametrize()
def test_no_input_makes_the_server_fail(case, session, server_errors) -> None:
    server_errors.take()  # what earlier requests logged is theirs
    response = case.call(session=session)
    logged = server_errors.take()
    assert response.status_code < 500, (
        f"{response.status_code} for this request:\n{case.as_curl_command()}\n\n"
        f"response: {response.text[:2000]}\n\nserver log:\n" + ("\n".join(logged) or "(none)")
    )
