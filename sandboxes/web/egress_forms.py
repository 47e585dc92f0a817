"""The pages' forms for the egress policy: the create form's Network select and allow-list,
the team's allow-list, and a new secret. They check what a person can get wrong on the page;
the services check every rule again and have the last word."""

from __future__ import annotations

from typing import Any

from django import forms

MODE_LABELS = {"off": "Off", "allowlist": "Allow-list", "public": "Public internet"}
MODES = tuple(MODE_LABELS)
RULE_HELP = (
    "One per line: a name, <code>*.</code> for any name under one, ports after a colon "
    "(default 80 and 443): <code>pypi.org</code>, <code>*.pythonhosted.org:443</code>, "
    "<code>github.com:22,443</code>."
)
MAX_RULES = 200


def lines_of(text: str) -> list[str]:
    """The non-empty lines of a textarea, trimmed."""
    return [line.strip() for line in (text or "").splitlines() if line.strip()]


def network_fields(modes: tuple[str, ...]) -> dict[str, forms.Field]:
    """The create form's Network select (only the modes the team allows) and, when the
    team allows allow-lists, the sandbox's own allow-list."""
    fields: dict[str, forms.Field] = {
        "network": forms.ChoiceField(
            label="Network",
            choices=[(mode, MODE_LABELS[mode]) for mode in modes],
            initial="off",
            help_text="Off: no network. Allow-list: only the names of your team's "
            "allow-list (or the narrower list below). Public internet: everything but "
            "private addresses. Connections go through the platform's egress proxy; refused "
            "ones show on the sandbox's page.",
        )
    }
    if "allowlist" in modes:
        fields["allow"] = forms.CharField(
            label="Also allow (allow-list mode)",
            required=False,
            max_length=MAX_RULES * 64,
            widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false", "class": "code"}),
            help_text="Optional: a narrower list for this sandbox, each entry within your "
            "team's allow-list; empty: the team's whole list. " + RULE_HELP,
        )
    return fields


class AllowlistForm(forms.Form):
    allowlist = forms.CharField(
        label="Allow-list",
        required=False,
        max_length=MAX_RULES * 64,
        widget=forms.Textarea(attrs={"rows": 6, "spellcheck": "false", "class": "code"}),
        help_text=RULE_HELP,
    )

    def rules(self) -> list[str]:
        return lines_of(self.cleaned_data.get("allowlist", ""))


class SecretForm(forms.Form):
    def __init__(self, *args: Any, team_wide: bool = False, **kwargs: Any) -> None:
        kwargs.setdefault("auto_id", "secret_%s")
        super().__init__(*args, **kwargs)
        if not team_wide:  # only team owners and admins store secrets for everyone
            del self.fields["team_wide"]

    name = forms.CharField(
        max_length=100,
        help_text="The environment variable your sandboxes see, e.g. OPENAI_API_KEY. It "
        "holds a placeholder, never the value.",
    )
    hosts = forms.CharField(
        max_length=50 * 64,
        widget=forms.Textarea(attrs={"rows": 2, "spellcheck": "false", "class": "code"}),
        help_text="One name a line: where the value is sent, e.g. api.openai.com.",
    )
    header = forms.CharField(max_length=100, initial="Authorization")
    template = forms.CharField(
        max_length=200,
        initial="Bearer {value}",
        help_text="How the header's value is made: {value} is the secret.",
    )
    value = forms.CharField(
        max_length=8192,
        strip=False,
        # The value typed is never sent back in the page, not even after an error.
        widget=forms.PasswordInput(render_value=False, attrs={"autocomplete": "new-password"}),
        help_text="Stored encrypted; shown nowhere after saving.",
    )
    team_wide = forms.BooleanField(
        required=False,
        label="For the whole team",
        help_text="Every member's sandboxes get it; otherwise only yours.",
    )

    def hosts_list(self) -> list[str]:
        return lines_of(self.cleaned_data.get("hosts", ""))
