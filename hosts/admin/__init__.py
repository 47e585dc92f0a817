"""Admin for where sandboxes live: hosts (probe, drain), their credentials, images."""

from __future__ import annotations

import json
import logging
from typing import Any

from django import forms
from django.contrib import admin
from django.db.models import Count, Q, QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils.decorators import method_decorator
from django.views.decorators.debug import sensitive_post_parameters

from hosts.admin.actions import apply_each
from hosts.admin.hostkeys import confirm_host_keys, fetch_host_keys
from hosts.admin.usage import UsageChartsAdmin
from hosts.models import Credential, Host, Image
from sandboxes import services
from sandboxes.contract.results import HostInfo
from sandboxes.models import LIVE_STATUSES
from sandboxes.web import charts
from tenants.admin import admin_principal, truncated

logger = logging.getLogger(__name__)


# --- credentials -----------------------------------------------------------------------------


class WriteOnlyTextarea(forms.Textarea):
    """A textarea that never renders a value, not even the one just submitted.

    A textarea rather than a password input because private keys and TLS material span lines.
    """

    def format_value(self, value: Any) -> None:
        return None


class CredentialForm(forms.ModelForm):
    secret = forms.CharField(
        widget=WriteOnlyTextarea(attrs={"rows": 6, "autocomplete": "off", "spellcheck": "false"}),
        strip=False,
        required=False,
        help_text="Write-only: never shown again. On change, leave empty to keep the current "
        "secret. Docker TLS material is a JSON object with ca, cert and key (PEM text).",
    )

    passphrase = forms.CharField(
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "off"}),
        strip=False,
        required=False,
        help_text="SSH private key only, if the key has one. Write-only; on change, leave "
        "empty to keep the current one (a new secret without one clears it).",
    )

    class Meta:
        model = Credential
        fields = ["name", "kind", "username"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # Required when there is no secret yet; optional (= keep) once one is stored.
        self.fields["secret"].required = self.instance.pk is None

    def clean_secret(self) -> str:
        # Browsers send textarea line breaks as CRLF; keys and certificates want LF.
        return self.cleaned_data["secret"].replace("\r\n", "\n")

    def clean(self) -> dict[str, Any]:
        super().clean()
        # ModelForm.clean returns cleaned_data; its stub says it may return None.
        cleaned = self.cleaned_data
        secret = cleaned.get("secret")
        if secret and cleaned.get("kind") == Credential.Kind.DOCKER_TLS:
            self._check_tls_json(secret)
        return cleaned

    def _check_tls_json(self, secret: str) -> None:
        # Never echo the secret back in the error message.
        try:
            material = json.loads(secret)
        except ValueError:
            self.add_error("secret", "Docker TLS material must be a JSON object.")
            return
        if not isinstance(material, dict):
            self.add_error("secret", "Docker TLS material must be a JSON object.")

    def save(self, commit: bool = True) -> Credential:
        credential = super().save(commit=False)
        if self.cleaned_data.get("secret"):
            credential.set_secret(self.cleaned_data["secret"])
            credential.set_passphrase(self.cleaned_data.get("passphrase") or "")
        elif self.cleaned_data.get("passphrase"):
            credential.set_passphrase(self.cleaned_data["passphrase"])
        if commit:
            credential.save()
        return credential


@admin.register(Credential)
class CredentialAdmin(admin.ModelAdmin):
    form = CredentialForm
    list_display = ["name", "kind", "username", "host_count", "updated_at"]
    list_filter = ["kind"]
    search_fields = ["name", "username"]
    # secret_encrypted is in neither list: the ciphertext never reaches a page either.
    fields = ["name", "kind", "username", "secret", "passphrase", "created_at", "updated_at"]
    readonly_fields = ["created_at", "updated_at"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Credential]:
        return super().get_queryset(request).annotate(_host_count=Count("host"))

    @admin.display(description="hosts", ordering="_host_count")
    def host_count(self, credential: Credential) -> int:
        # Annotated by get_queryset, so not an attribute the type checker knows.
        count: int = getattr(credential, "_host_count", 0)
        return count

    # Keeps the submitted secret out of Django's error reports and debug pages.
    @method_decorator(sensitive_post_parameters("secret", "passphrase"))
    def changeform_view(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        return super().changeform_view(request, *args, **kwargs)


# --- hosts -----------------------------------------------------------------------------------


def _describe_probe(info: HostInfo) -> str:
    if info.healthy:
        return f"{info.name}: healthy, idle score {info.idle_score:g}"
    return f"{info.name}: unhealthy ({info.last_error or 'no detail'})"


@admin.register(Host)
class HostAdmin(UsageChartsAdmin, admin.ModelAdmin):
    # Fits at 1280 px beside the filters: whether the host takes sandboxes and how full it
    # is first; enabled/draining/healthy in one "state", live and maximum in one "sandboxes",
    # the endpoint cut (whole in its title). GPUs and the rest are on the change page.
    list_display = [
        "name",
        "kind",
        "state",
        "load",
        "idle_score",
        "team",
        "host_key",
        "isolation",
        "short_endpoint",
        "last_probe_at",
    ]
    list_filter = ["kind", "enabled", "draining", "healthy", "team"]
    search_fields = ["name", "endpoint", "last_error"]
    list_select_related = ["team"]
    autocomplete_fields = ["credential", "team"]
    actions = ["probe_hosts", "drain_hosts", "undrain_hosts", fetch_host_keys, confirm_host_keys]
    # Draining changes only through the actions, so every change leaves an audit row.
    readonly_fields = [
        "draining",
        "healthy",
        "last_probe_at",
        "cpu_percent",
        "memory_percent",
        "gpu_percent",
        "idle_score",
        "last_error",
        "created_at",
        # Pinned only through the confirm action (an audit row each), learnt by probes.
        "host_key_pinned",
        "host_key_seen",
        "host_key_type",
        "host_key_seen_at",
        "per_sandbox_users",
        "isolated",
        "why_not",
        "gpu_count",
        "gpus",
        "usage_charts",
    ]
    fieldsets = [
        (None, {"fields": ["name", "kind", "endpoint", "credential", "team"]}),
        ("Scheduling", {"fields": ["enabled", "draining", "max_sandboxes", "labels"]}),
        (
            "SSH",
            {
                "fields": [
                    "base_dir",
                    "host_key_pinned",
                    "host_key_seen",
                    "host_key_type",
                    "host_key_seen_at",
                    "per_sandbox_users",
                    "isolated",
                    "why_not",
                ],
                "description": "The login user is the credential's username. Fetch the host "
                "key and confirm it with the actions in the host list: until then the host "
                "gets no sandboxes. Unless probes find that its sandboxes can be isolated "
                "(a Unix user each through sudo -n, namespaces, user-mode networking, "
                "whole-sandbox limits through cgroups, a disk each), the host is offered only "
                "to its own team; 'why not' lists what is missing.",
            },
        ),
        ("GPUs", {"fields": ["gpu_count", "gpus"]}),
        ("Backend options", {"fields": ["options"], "classes": ["collapse"]}),
        (
            "Last probe",
            {
                "fields": [
                    "healthy",
                    "last_probe_at",
                    "idle_score",
                    "cpu_percent",
                    "memory_percent",
                    "gpu_percent",
                    "last_error",
                    "created_at",
                    "usage_charts",
                ]
            },
        ),
    ]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Host]:
        live = Count("sandboxes", filter=Q(sandboxes__status__in=LIVE_STATUSES))
        return super().get_queryset(request).annotate(_live=live)

    @admin.display(description="state", ordering="healthy")
    def state(self, host: Host) -> str:
        """Whether the scheduler places sandboxes on it, and if not, why."""
        if not host.enabled:
            return "disabled"
        if host.draining:
            return "draining"
        return "healthy" if host.healthy else "unhealthy"

    @admin.display(description="sandboxes", ordering="_live")
    def load(self, host: Host) -> str:
        live: int = getattr(host, "_live", 0)  # annotated by get_queryset
        return f"{live} / {host.max_sandboxes}" if host.max_sandboxes else str(live)

    @admin.display(description="endpoint", ordering="endpoint")
    def short_endpoint(self, host: Host) -> str:
        return truncated(host.endpoint, 32)

    @admin.display(description="last hour")
    def usage_charts(self, host: Host) -> str:
        return self.usage_charts_of(
            lambda request: charts.host_charts(
                services.get_host_metrics(admin_principal(request), host.name), f"host-{host.pk}"
            )
        )

    @admin.display(description="host key")
    def host_key(self, host: Host) -> str:
        """SSH: whether the key is pinned, and whether the host last presented another."""
        if host.kind != Host.Kind.SSH:
            return "—"
        if not host.host_key_pinned:
            return "not confirmed: not used" if host.host_key_seen else "not fetched: not used"
        if host.host_key_seen and host.host_key_seen != host.host_key_pinned:
            return "CHANGED: refused"
        return "pinned"

    @admin.display(description="isolated", ordering="isolated")
    def isolation(self, host: Host) -> str:
        """SSH: whether sandboxes there are kept apart, else who may use the host."""
        if host.kind != Host.Kind.SSH:
            return "—"
        if host.isolated:
            return "yes"
        return "no: its team only" if host.team_id else "no: not used (shared)"

    @admin.display(description="why not")
    def why_not(self, host: Host) -> str:
        """SSH: what the last probe found missing for isolation, one reason per line."""
        if host.kind != Host.Kind.SSH or host.isolated:
            return "—"
        return host.isolation_missing or "not probed yet"

    @admin.display(description="live sandboxes", ordering="_live")
    def live_sandboxes(self, host: Host) -> int:
        # Annotated by get_queryset, so not an attribute the type checker knows.
        live: int = getattr(host, "_live", 0)
        return live

    @admin.action(description="Probe selected hosts", permissions=["change"])
    def probe_hosts(self, request: HttpRequest, queryset: QuerySet[Host]) -> None:
        principal = admin_principal(request)
        apply_each(
            self,
            request,
            queryset,
            lambda host: _describe_probe(services.probe_host(principal, host.pk)),
        )

    @admin.action(description="Drain selected hosts (no new sandboxes)", permissions=["change"])
    def drain_hosts(self, request: HttpRequest, queryset: QuerySet[Host]) -> None:
        self._set_draining(request, queryset, True)

    @admin.action(description="Undrain selected hosts", permissions=["change"])
    def undrain_hosts(self, request: HttpRequest, queryset: QuerySet[Host]) -> None:
        self._set_draining(request, queryset, False)

    def _set_draining(self, request: HttpRequest, queryset: QuerySet[Host], draining: bool) -> None:
        principal = admin_principal(request)
        word = "draining" if draining else "accepting sandboxes"

        def call(host: Host) -> str:
            info = services.set_host_draining(principal, host.pk, draining)
            return f"{info.name}: {word}"

        apply_each(self, request, queryset, call)


# --- images ----------------------------------------------------------------------------------


@admin.register(Image)
class ImageAdmin(admin.ModelAdmin):
    list_display = ["name", "reference", "is_default", "allowed_teams", "warm_pool_size"]
    list_filter = ["is_default", "teams"]
    search_fields = ["name", "reference", "description"]
    filter_horizontal = ["teams"]
    readonly_fields = ["created_at"]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Image]:
        return super().get_queryset(request).prefetch_related("teams")

    @admin.display(description="teams")
    def allowed_teams(self, image: Image) -> str:
        # Reads the prefetched teams: no query per row.
        return ", ".join(team.slug for team in image.teams.all()) or "every team"
