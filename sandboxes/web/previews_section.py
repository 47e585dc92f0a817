"""The "Previews" section of the sandbox page: its forms, and its context (the sandbox's open
previews, each with where its "Open" link goes), which sandboxes/web/sandbox.py's render_page
adds to the page. The section's views are in sandboxes/web/previews.py.

Where "Open" goes depends on how previews are addressed:
- path mode (no SANDHUB_PREVIEW_DOMAIN): /preview/SANDBOX/PORT/ is on the platform's own
  origin, so the member's session cookie reaches the proxy: a plain link needs no token;
- host mode: each preview is an origin of its own (PORT-SANDBOX.<domain>) that the session
  cookie never reaches, so the link goes through previews.open_preview, which mints a token
  and redirects to the preview with it;
- a public preview (of a team that allows them) needs nothing: its own address.
"""

from __future__ import annotations

from typing import Any

from django import forms
from django.conf import settings
from django.http import HttpRequest
from django.urls import reverse

from sandboxes import services
from sandboxes.contract.errors import ServiceError
from sandboxes.contract.results import CommandResult, PreviewInfo
from sandboxes.web.principal import MANAGER_ROLES, identity_for, principal_for
from sandboxes.web.sandbox_forms import MAX_COMMAND_CHARS


def port_field(help_text: str) -> forms.IntegerField:
    """A required port, with no placeholder (a grey "8000" read as a value already there):
    the example is in the help text, and an empty field says what is missing."""
    return forms.IntegerField(
        min_value=1,
        max_value=65535,
        label="Port",
        help_text=help_text,
        error_messages={"required": "Type the port the app listens on, e.g. 8000."},
    )


class OpenPreviewForm(forms.Form):
    port = port_field("The port the server listens on in the sandbox, e.g. 8000.")
    public = forms.BooleanField(
        required=False,
        label="Public",
        help_text="Anyone with the address may open it, without signing in.",
    )

    def __init__(self, *args: Any, may_publish: bool = False, **kwargs: Any) -> None:
        # Prefixed: the deploy form on the same page has a port too.
        kwargs.setdefault("prefix", "preview")
        super().__init__(*args, **kwargs)
        if not may_publish:
            del self.fields["public"]

    def public_choice(self) -> bool | None:
        """True/False as ticked when the form offers it; None (leave as it is) otherwise."""
        if "public" not in self.fields:
            return None
        return bool(self.cleaned_data.get("public"))


class DeployForm(forms.Form):
    command = forms.CharField(
        max_length=MAX_COMMAND_CHARS,
        strip=False,
        label="Start command",
        widget=forms.Textarea(attrs={"rows": 2, "spellcheck": "false", "autocomplete": "off"}),
        help_text="Runs in /workspace as a background job and must keep serving in the "
        "foreground (no '&' or nohup), e.g. <code>python3 -m http.server 8000</code>.",
    )
    port = port_field("The port the app listens on, e.g. 8000 for the command above.")
    wait_seconds = forms.IntegerField(
        required=False,
        min_value=1,
        max_value=int(services.MAX_WAIT_SECONDS),
        label="Wait (seconds)",
        help_text=f"For the port to answer; default {services.DEFAULT_WAIT_SECONDS:g} s.",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("prefix", "deploy")  # the runner and jobs forms have a command too
        super().__init__(*args, **kwargs)
        self.fields["wait_seconds"].widget.attrs["placeholder"] = (
            f"{services.DEFAULT_WAIT_SECONDS:g}"
        )

    def clean_command(self) -> str:
        command: str = self.cleaned_data["command"]
        if not command.strip():
            raise forms.ValidationError("Type the command that starts the app.")
        return command


# --- the section's context ------------------------------------------------------------------


def host_mode() -> bool:
    return bool(getattr(settings, "SANDHUB_PREVIEW_DOMAIN", ""))


def may_publish(request: HttpRequest) -> bool:
    """Whether the "public" choice is offered: team owners and admins, if the team allows."""
    identity = identity_for(request)
    team = identity.principal.team
    return bool(team and team.allow_public_previews and identity.role in MANAGER_ROLES)


def is_public(request: HttpRequest, info: PreviewInfo) -> bool:
    team = principal_for(request).team
    return bool(info.public and team and team.allow_public_previews)


def open_url(request: HttpRequest, info: PreviewInfo) -> str | None:
    """Where the "Open" link goes: the preview itself when the browser can reach it as it is,
    else the view that adds a token (see the module's docstring)."""
    if host_mode() and not is_public(request, info):
        return reverse("web:sandbox-preview-open", args=[info.sandbox_id, info.port])
    return services.preview_url(request.build_absolute_uri("/"), info.sandbox_id, info.port, None)


def previews_context(
    request: HttpRequest,
    sandbox_id: str,
    history: list[CommandResult],
    bound: dict[str, forms.Form],
) -> dict[str, Any]:
    """The section's rows (each preview with its link and its app's job, when the recent
    history has it), its forms, or why the list could not be read."""
    found: list[PreviewInfo] = []
    error = ""
    try:
        found = services.list_previews(principal_for(request), sandbox_id)
    except ServiceError as exc:
        error = exc.message
    jobs = {c.id: c for c in history if c.background}
    rows = [
        {
            "preview": info,
            "public": is_public(request, info),
            "url": open_url(request, info),
            "job": jobs.get(info.command_id) if info.command_id else None,
        }
        for info in found
    ]
    publish = may_publish(request)
    return {
        "previews": rows,
        "previews_error": error,
        "preview_form": bound.get("preview_form") or OpenPreviewForm(may_publish=publish),
        "deploy_form": bound.get("deploy_form") or DeployForm(),
        "previews_host_mode": host_mode(),
    }
