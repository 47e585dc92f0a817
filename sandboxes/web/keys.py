"""API keys: the user's own keys in the acting team; create one (shown once, with the lines
that add Sandhub to Claude Code) and revoke."""

from __future__ import annotations

import json

from django.contrib import messages
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from sandboxes.contract.errors import ServiceError
from sandboxes.services.team import list_my_api_keys, revoke_api_key_by_id
from sandboxes.web.common import attach_error, refused
from sandboxes.web.forms import ApiKeyForm
from sandboxes.web.principal import principal_for, team_required
from tenants import services as tenant_services
from tenants.apikeys import parse_expiry

MCP_PATH = "/mcp/"
KEY_FIELDS = {"scope": "scopes", "expir": "expires", "name": "name"}


def claude_mcp_add_line(mcp_url: str, key: str) -> str:
    """The line `manage.py create_api_key --claude` prints, character for character."""
    return (
        f'claude mcp add --transport http sandhub {mcp_url} --header "Authorization: Bearer {key}"'
    )


KEY_VARIABLE = "SANDHUB_API_KEY"


def mcp_json(mcp_url: str) -> str:
    """A project's .mcp.json entry for Sandhub (Claude Code's format), as README.md's MCP
    section has it: the key comes from the environment (Claude Code expands ${VAR} in
    headers), so the file can be committed without the secret."""
    config = {
        "mcpServers": {
            "sandhub": {
                "type": "http",
                "url": mcp_url,
                "headers": {"Authorization": f"Bearer ${{{KEY_VARIABLE}}}"},
            }
        }
    }
    return json.dumps(config, indent=2)


def export_line(key: str) -> str:
    """The shell line that puts the key where the .mcp.json entry reads it."""
    return f"export {KEY_VARIABLE}={key}"


@team_required
@require_http_methods(["GET", "POST"])
def keys(request: HttpRequest) -> HttpResponse:
    principal = principal_for(request)
    form = ApiKeyForm(request.POST or None)
    created = None
    status = 200
    if request.method == "POST":
        status = 400
        if form.is_valid():
            data = form.cleaned_data
            try:
                key, plaintext = tenant_services.create_api_key(
                    principal,
                    principal.user,
                    principal.team,  # type: ignore[arg-type]  # team_required: never None
                    data["name"],
                    data["scopes"],
                    parse_expiry(data["expires"]),
                )
            except ServiceError as exc:
                attach_error(form, exc, KEY_FIELDS)
                status = exc.http_status
            else:
                # Shown on this response only: the plaintext is stored nowhere.
                mcp_url = request.build_absolute_uri(MCP_PATH)
                created = {
                    "key": key,
                    "plaintext": plaintext,
                    "claude": claude_mcp_add_line(mcp_url, plaintext),
                    "mcp_json": mcp_json(mcp_url),
                    "export": export_line(plaintext),
                }
                form = ApiKeyForm()
                status = 200
    try:
        my_keys = list_my_api_keys(principal)
    except ServiceError as exc:
        return refused(request, exc)
    context = {"form": form, "keys": my_keys, "created": created}
    response = render(request, "web/keys.html", context, status=status)
    # The page holding a new key must not be kept by the browser or any proxy.
    response["Cache-Control"] = "no-store"
    return response


@team_required
@require_POST
def revoke(request: HttpRequest, key_id: int) -> HttpResponse:
    try:
        key = revoke_api_key_by_id(principal_for(request), key_id)
    except ServiceError as exc:
        return refused(request, exc)
    messages.success(request, f"API key shk_{key.prefix} is revoked: it works nowhere any more.")
    return redirect("web:keys")
