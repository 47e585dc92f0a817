"""E2B's control API (the `E2B_API_URL` of its SDKs) on Sandhub's services: create, list,
get, kill, set timeout, pause, resume and connect. Thin views: read E2B's request, call one
service as the key's user (channel "e2b": every call audited, every quota held), answer in
E2B's shape (shapes.py). Another team's sandbox answers 404 as an id that never existed.

What E2B has and these do not: a timeout is kept to the minute at creation and to the
second by set_timeout; autoPause and network rules other than on/off are refused or ignored
as docs/e2b.md's table says. Lists filter and page as listing.py says.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from django.views.decorators.csrf import csrf_exempt

from e2b_compat import listing, shapes
from e2b_compat.auth import Caller, api_caller, envd_token
from e2b_compat.errors import api_error, json_body, rest_error
from sandboxes import services
from sandboxes.contract.errors import InvalidInput
from sandboxes.policy.validation import SANDBOX_ID_RE
from tenants.apikeys import clean_address

__all__ = ["connect", "pause", "resume", "sandbox", "sandboxes", "timeout"]

View = Callable[..., HttpResponse]
DEFAULT_TIMEOUT_SECONDS = 300  # E2B's default lifetime of a new sandbox


def e2b_view(*methods: str) -> Callable[[View], View]:
    """The caller from X-API-Key, the method checked, refusals in E2B's Error shape."""

    def wrap(view: View) -> View:
        @csrf_exempt
        def handle(request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
            if request.method not in methods:
                return api_error(405, f"{request.method} is not allowed here")
            sandbox_id = kwargs.get("sandbox_id")
            if sandbox_id is not None and not SANDBOX_ID_RE.match(sandbox_id):
                # Not a Sandhub id at all: E2B's SDKs take only 404 for "no such sandbox"
                # (kill() answers False), so it answers as an unknown one does.
                return api_error(404, f"sandbox {sandbox_id} not found")
            try:
                caller = api_caller(
                    request.headers.get("X-API-Key"), clean_address(request.META.get("REMOTE_ADDR"))
                )
                return view(request, caller, *args, **kwargs)
            except Exception as exc:
                answer = rest_error(exc)
                if answer is None:
                    raise
                return answer

        return handle

    return wrap


@e2b_view("GET", "POST")
def sandboxes(request: HttpRequest, caller: Caller) -> HttpResponse:
    """POST: create (E2B's NewSandbox); GET: the team's sandboxes (v1: running ones)."""
    if request.method == "POST":
        return _create(request, caller)
    infos = [i for i in services.list_sandboxes(caller.principal) if i.status not in shapes.GONE]
    listed = [shapes.listed(i) for i in listing.matching(infos, request.GET, v1=_v1(request))]
    page, next_token = listing.page(listed, request.GET)
    response = JsonResponse(page, safe=False)
    if next_token is not None:
        response["X-Next-Token"] = next_token
    return response


def _v1(request: HttpRequest) -> bool:
    return "/v2/" not in request.path


def _create(request: HttpRequest, caller: Caller) -> HttpResponse:
    body = json_body(request.body)
    seconds = _seconds(body.get("timeout", DEFAULT_TIMEOUT_SECONDS))
    env = _strings(body.get("envVars"), "envVars")
    if body.get("autoPause"):
        raise InvalidInput(
            "autoPause is not supported: a Sandhub sandbox is deleted at its timeout, or "
            "paused or stopped as its team's idle policy says"
        )
    network = body.get("allow_internet_access")
    info = services.create_sandbox(
        caller.principal,
        image=shapes.template_image(body.get("templateID")),
        env=env,
        lifetime_minutes=max(1, math.ceil(seconds / 60)),
        metadata=_strings(body.get("metadata"), "metadata"),
        network=None if network is None else bool(network),
        request_id=request.headers.get("Idempotency-Key") or None,
    )
    token = envd_token(caller.key, info.id)
    return JsonResponse(shapes.created(info, token, None), status=201)


def _strings(value: object, what: str) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(isinstance(v, str) for v in value.values()):
        raise InvalidInput(f"{what} must be an object of strings")
    return value


def _seconds(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InvalidInput("timeout must be a positive number of seconds")
    return value


@e2b_view("GET", "DELETE")
def sandbox(request: HttpRequest, caller: Caller, sandbox_id: str) -> HttpResponse:
    """GET: one sandbox (E2B's SandboxDetail); DELETE: kill it."""
    if request.method == "DELETE":
        services.delete_sandbox(caller.principal, sandbox_id)
        return HttpResponse(status=204)
    info = services.get_sandbox(caller.principal, sandbox_id)
    return JsonResponse(shapes.detail(info, envd_token(caller.key, info.id), None))


@e2b_view("POST")
def timeout(request: HttpRequest, caller: Caller, sandbox_id: str) -> HttpResponse:
    """Expire `timeout` seconds from now (E2B's set_timeout)."""
    seconds = _seconds(json_body(request.body).get("timeout"))
    services.set_sandbox_timeout(caller.principal, sandbox_id, seconds)
    return HttpResponse(status=204)


@e2b_view("POST")
def pause(request: HttpRequest, caller: Caller, sandbox_id: str) -> HttpResponse:
    change = services.pause_sandbox(caller.principal, sandbox_id)
    if not change.changed and change.sandbox.status == "paused":
        return api_error(409, f"sandbox {sandbox_id} is already paused")
    return HttpResponse(status=204)


@e2b_view("POST")
def resume(request: HttpRequest, caller: Caller, sandbox_id: str) -> HttpResponse:
    """Resume a paused sandbox (409 if it runs), then give it `timeout` seconds."""
    return _back_up(request, caller, sandbox_id, refuse_running=True)


@e2b_view("POST")
def connect(request: HttpRequest, caller: Caller, sandbox_id: str) -> HttpResponse:
    """A running sandbox as it is (200), a paused one resumed (201); `timeout` seconds."""
    return _back_up(request, caller, sandbox_id, refuse_running=False)


def _back_up(
    request: HttpRequest, caller: Caller, sandbox_id: str, *, refuse_running: bool
) -> HttpResponse:
    body = json_body(request.body)
    change = services.resume_sandbox(caller.principal, sandbox_id)
    if refuse_running and not change.changed:
        return api_error(409, f"sandbox {sandbox_id} is already running")
    info = change.sandbox
    if "timeout" in body:
        # As E2B: connecting never shortens a sandbox's life, it only lengthens it.
        seconds = _seconds(body["timeout"])
        left = (info.expires_at - timezone.now()).total_seconds() if info.expires_at else 0
        if seconds > left:
            services.set_sandbox_timeout(caller.principal, sandbox_id, seconds)
    info = services.get_sandbox(caller.principal, sandbox_id)
    token = envd_token(caller.key, info.id)
    return JsonResponse(shapes.created(info, token, None), status=201 if change.changed else 200)
