"""The sandbox page's forms: what a person can get wrong on the page is checked here, next to
its field; the services check everything again and have the last word."""

from __future__ import annotations

import posixpath
from typing import Any

from django import forms
from django.conf import settings
from django.core.files.uploadedfile import UploadedFile

from sandboxes.models import CommandStatus

WORKSPACE = "/workspace"
MAX_COMMAND_CHARS = 100_000
# A file edited in the page's text box, at most: bigger ones are downloaded and uploaded.
EDIT_MAX_BYTES = 256 * 1024


class RunForm(forms.Form):
    command = forms.CharField(
        max_length=MAX_COMMAND_CHARS,
        strip=False,  # the command runs as typed; only an empty one is refused
        widget=forms.Textarea(attrs={"rows": 3, "spellcheck": "false", "autocomplete": "off"}),
    )
    timeout = forms.IntegerField(required=False, min_value=1)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        limit = settings.SANDHUB_MAX_TIMEOUT_SECONDS
        field = self.fields["timeout"]
        field.validators.append(_at_most(limit, "seconds"))
        field.widget.attrs.update({"max": limit, "placeholder": "seconds"})
        field.help_text = (
            f"Killed after this; default {settings.SANDHUB_DEFAULT_TIMEOUT_SECONDS} s, "
            f"at most {limit} s."
        )

    def clean_command(self) -> str:
        command: str = self.cleaned_data["command"]
        if not command.strip():
            raise forms.ValidationError("Type a command to run.")
        return command


class ExtendForm(forms.Form):
    minutes = forms.IntegerField(min_value=1, label="Extend by (minutes)", initial=60)

    def __init__(self, *args: Any, left: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        field = self.fields["minutes"]
        field.validators.append(_at_most(left, "minutes (your team's maximum lifetime)"))
        field.widget.attrs["max"] = max(left, 1)
        field.help_text = f"At most {left} more minutes (your team's maximum lifetime)."
        self.initial["minutes"] = min(60, left) if left else 1


class HistoryFilterForm(forms.Form):
    status = forms.ChoiceField(choices=[("", "Any status"), *CommandStatus.choices], required=False)


class MultipleFileInput(forms.ClearableFileInput):
    allow_multiple_selected = True


class MultipleFileField(forms.FileField):
    """Several files from one <input type=file multiple> (the Django documentation's recipe)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("widget", MultipleFileInput(attrs={"multiple": True}))
        super().__init__(*args, **kwargs)

    def clean(self, data: Any, initial: Any = None) -> list[UploadedFile]:
        single = super().clean
        if isinstance(data, list | tuple):
            return [single(item, initial) for item in data]
        return [single(data, initial)]


class UploadForm(forms.Form):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("auto_id", "upload_%s")  # ids unique on the sandbox page
        super().__init__(*args, **kwargs)
        # Added here, not declared: a form's own `files` attribute holds the uploaded files.
        self.fields["files"] = MultipleFileField(
            label="Files", help_text="Pick one or more; they keep their names."
        )
        self.order_fields(["files", "directory"])

    directory = forms.CharField(widget=forms.HiddenInput, initial=WORKSPACE, required=False)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        files: list[UploadedFile] = data.get("files") or []
        limit = settings.SANDHUB_MAX_TRANSFER_BYTES
        if sum(f.size or 0 for f in files) > limit:
            self.add_error("files", f"Uploads are limited to {limit} bytes at once.")
        return data


class FileForm(forms.Form):
    """Create a small text file, or save one edited in the page."""

    path = forms.CharField(max_length=4096)
    content = forms.CharField(
        required=False,
        strip=False,
        widget=forms.Textarea(attrs={"rows": 4, "spellcheck": "false", "class": "code"}),
    )
    directory = forms.CharField(widget=forms.HiddenInput, required=False)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("auto_id", "file_%s")  # ids unique on the sandbox page
        super().__init__(*args, **kwargs)
        # The folder shown, which a relative path starts at (not always /workspace).
        folder = self.data.get("directory") or self.initial.get("directory") or WORKSPACE
        self.fields["path"].help_text = f"Relative paths start at the folder shown ({folder})."

    def tall(self) -> FileForm:
        """For a whole file on its own page rather than a note on the sandbox page."""
        self.fields["content"].widget.attrs["rows"] = 24
        return self

    def clean_content(self) -> str:
        content: str = self.cleaned_data.get("content") or ""
        # Browsers send a textarea's line ends as CRLF; a file edited here keeps the
        # sandbox's own line ends.
        content = content.replace("\r\n", "\n")
        if len(content.encode()) > EDIT_MAX_BYTES:
            raise forms.ValidationError(
                f"At most {EDIT_MAX_BYTES // 1024} KiB here; upload bigger files instead."
            )
        return content

    def full_path(self) -> str:
        """The path typed, taken from the folder shown when relative."""
        path: str = self.cleaned_data["path"].strip()
        directory = self.cleaned_data.get("directory") or WORKSPACE
        return posixpath.normpath(posixpath.join(directory, path))


class StartJobForm(forms.Form):
    command = forms.CharField(
        max_length=MAX_COMMAND_CHARS,
        strip=False,
        label="Command",
        widget=forms.Textarea(attrs={"rows": 2, "spellcheck": "false", "autocomplete": "off"}),
        help_text="Runs detached: it goes on when you leave the page.",
    )
    max_runtime_seconds = forms.IntegerField(required=False, min_value=1, label="Stop after")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # Prefixed: the runner's form on the same page has a "command" field too.
        kwargs.setdefault("prefix", "job")
        super().__init__(*args, **kwargs)
        limit = settings.SANDHUB_MAX_TIMEOUT_SECONDS
        field = self.fields["max_runtime_seconds"]
        field.validators.append(_at_most(limit, "seconds"))
        field.widget.attrs.update({"max": limit, "placeholder": "seconds"})
        field.help_text = f"Killed after this many seconds; at most (and by default) {limit}."

    def clean_command(self) -> str:
        command: str = self.cleaned_data["command"]
        if not command.strip():
            raise forms.ValidationError("Type a command to run.")
        return command


def _at_most(limit: int, unit: str) -> Any:
    def check(value: Any) -> None:
        if value is not None and value > limit:
            raise forms.ValidationError(f"At most {limit} {unit}.")

    return check
