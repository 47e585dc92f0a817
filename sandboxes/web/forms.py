"""The pages' forms. They check what a person can get wrong on the page (with the team's
limits as bounds, so the error shows next to the field); the services check everything
again and have the last word."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from django import forms

from sandboxes.models import CommandStatus
from sandboxes.services.team import TeamUsage
from sandboxes.web.egress_forms import lines_of, network_fields
from tenants.models import ApiKeyScope, AuditKind, Channel, Role

EXPIRY_CHOICES = [
    ("1d", "1 day"),
    ("7d", "7 days"),
    ("30d", "30 days"),
    ("90d", "90 days"),
    ("365d", "1 year"),
    ("", "Never"),
]


class CreateSandboxForm(forms.Form):
    """The team's limits are the fields' bounds, so a value over a limit is refused next to
    its field (and the browser's own check uses the same max)."""

    def __init__(
        self, *args: Any, usage: TeamUsage, network_modes: tuple[str, ...] = ("off",), **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        over = {"max_value": "Your team's limit is %(limit_value)s."}
        self.fields.update(
            {
                "image": forms.ChoiceField(
                    choices=[
                        (i.name, f"{i.name} — {i.description}" if i.description else i.name)
                        for i in usage.images
                    ],
                    initial=usage.default_image,
                ),
                "name": forms.CharField(
                    max_length=100,
                    required=False,
                    help_text="Optional: something to recognise it by.",
                ),
                "cpus": forms.FloatField(
                    label="CPUs",
                    min_value=0.1,
                    max_value=usage.max_cpus_per_sandbox,
                    initial=min(1.0, usage.max_cpus_per_sandbox),
                    widget=forms.NumberInput(attrs={"step": "0.1"}),
                    error_messages=over,
                    help_text=f"At most {usage.max_cpus_per_sandbox:g}.",
                ),
                "memory_mb": forms.IntegerField(
                    label="Memory (MB)",
                    min_value=16,
                    max_value=usage.max_memory_mb_per_sandbox,
                    initial=min(1024, usage.max_memory_mb_per_sandbox),
                    error_messages=over,
                    help_text=f"At most {usage.max_memory_mb_per_sandbox} MB.",
                ),
                "disk_mb": forms.IntegerField(
                    label="Disk (MB)",
                    min_value=64,
                    max_value=usage.max_disk_mb_per_sandbox,
                    initial=min(1024, usage.max_disk_mb_per_sandbox),
                    error_messages=over,
                    help_text=f"Size of /workspace, at most {usage.max_disk_mb_per_sandbox} MB.",
                ),
                "lifetime_minutes": forms.IntegerField(
                    label="Lifetime (minutes)",
                    min_value=1,
                    max_value=usage.max_lifetime_minutes,
                    initial=usage.default_lifetime_minutes,
                    error_messages=over,
                    help_text=f"Deleted after this; at most {usage.max_lifetime_minutes} minutes.",
                ),
            }
        )
        if len(network_modes) > 1:  # a team that may not gets no control for it at all
            self.fields.update(network_fields(network_modes))

    def allow_rules(self) -> list[str] | None:
        """The allow-list typed (one rule a line), or None when none was."""
        return lines_of(self.cleaned_data.get("allow", "")) or None


class ApiKeyForm(forms.Form):
    name = forms.CharField(
        max_length=100, required=False, help_text="Where you use it, e.g. “laptop Claude Code”."
    )
    scopes = forms.MultipleChoiceField(
        choices=ApiKeyScope.choices,
        initial=["read", "write"],
        widget=forms.CheckboxSelectMultiple,
        help_text="Write includes read. Admin: manage the team's members and keys too.",
    )
    expires = forms.ChoiceField(choices=EXPIRY_CHOICES, initial="30d", required=False)


class AddMemberForm(forms.Form):
    username = forms.CharField(max_length=150, help_text="An existing user's username.")
    role = forms.ChoiceField(choices=Role.choices, initial=Role.MEMBER)


class RoleForm(forms.Form):
    role = forms.ChoiceField(choices=Role.choices)


class AuditFilterForm(forms.Form):
    actor = forms.CharField(max_length=150, required=False, help_text="A username.")
    action = forms.CharField(
        max_length=64, required=False, help_text="e.g. sandbox.create, or sandbox. for all."
    )
    channel = forms.ChoiceField(choices=[("", "Any channel"), *Channel.choices], required=False)
    kind = forms.ChoiceField(choices=[("", "Any kind"), *AuditKind.choices], required=False)
    since = forms.DateTimeField(
        required=False,
        label="From",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
    )
    until = forms.DateTimeField(
        required=False,
        label="Until",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
    )
    # The reader's offset from UTC in minutes (JavaScript's getTimezoneOffset(), filled in by
    # static/web/app.js): From and Until are typed in the reader's own time. Without it: UTC.
    tz = forms.IntegerField(
        required=False, min_value=-16 * 60, max_value=16 * 60, widget=forms.HiddenInput
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        shift = timedelta(minutes=data.get("tz") or 0)
        for name in ("since", "until"):
            if data.get(name) is not None:
                data[name] = data[name] + shift
        since: datetime | None = data.get("since")
        until: datetime | None = data.get("until")
        if since and until and until <= since:
            self.add_error("until", "Must be after From.")
        return data


class CommandFilterForm(forms.Form):
    status = forms.ChoiceField(choices=[("", "Any status"), *CommandStatus.choices], required=False)
